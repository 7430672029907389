//! Opening one planned upstream request: its tries over the model's upstreams, then over
//! each fallback model's, as [`crate::upstream::resilience`] rules; the body each try sends
//! (`body`); and the error the client gets when none succeeded (`errors`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use choicewise_client::ClientError;
use futures::StreamExt;
use serde_json::{Map, Value};

use crate::config::NMode;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::upstream::resilience::{
    Availability, Budget, ClientId, Health, Outcome, RetryPolicy, Warnings, classify,
};
use choicewise_client::Client;
use choicewise_core::Dialect;

mod body;
mod errors;
mod refusals;

pub(crate) use body::{Bodies, accounting};
use body::{limit_to_set, shared_body};
pub(crate) use errors::upstream_error;
use errors::why;
pub(crate) use refusals::Refusals;
use refusals::{Shape, refuses_logprobs};

/// A configured model's upstream, ready to call.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamRoute {
    pub api: Dialect,
    pub client: Client,
    /// The upstream's model name.
    pub model: String,
    /// Its model's token encoding, for the tokens it does not report.
    pub encoding: choicewise_usage::EncodingName,
    pub n_mode: NMode,
    /// The most samples one request carries, when native (`max_n`).
    pub max_n: Option<u32>,
    /// The limit a request that states none is sent with (`max_tokens`; an Anthropic
    /// upstream's default when not configured).
    pub max_tokens: Option<u64>,
    /// Its host, for messages (never a key).
    pub host: String,
    /// How long it may stay silent before its choices fail.
    pub idle_timeout: Duration,
    /// The most bytes one answer of this upstream may send per sample (`max_answer_bytes`).
    pub max_answer_bytes: usize,
    /// `API:MODEL@HOST`, for metrics.
    pub label: Arc<str>,
    /// Its share of the model's samples.
    pub weight: u32,
    /// Its passive health, shared by every request.
    pub health: Arc<Health>,
    /// Its own retry budget: the retries sent to it (its model's, and those of every
    /// model that falls back to it) are a share of the first tries it is sent.
    pub budget: Arc<Budget>,
    /// The log-probabilities it refused, by the request's shape (a confidence-guided vote
    /// asks for them on its own).
    pub refusals: Arc<Refusals>,
}

/// A configured model: its upstreams, its retry rules, its fallbacks.
#[derive(Debug)]
pub(crate) struct ModelRoutes {
    pub name: String,
    pub routes: Vec<UpstreamRoute>,
    pub retry: RetryPolicy,
    pub fallbacks: Vec<String>,
    /// Its retry budget: a model whose traffic fails spends its own retries, never
    /// another's.
    pub budget: Arc<Budget>,
    /// Its warnings of the tries, rate-limited.
    pub warnings: Warnings,
}

/// Every configured model, by name.
pub(crate) type Models = Arc<crate::config::ByName<Arc<ModelRoutes>>>;

/// One try, for the final `choicewise` object's `tries`.
#[derive(Debug, Clone)]
pub(crate) struct TryRecord {
    pub sample: u32,
    pub upstream: Arc<str>,
    pub outcome: Outcome,
    /// When it ended (its event's time in the request's span, on the clock the span's
    /// start and end are read from).
    pub at: std::time::Instant,
}

/// A limit the gateway set on a sample's request, the client having stated none: a `length`
/// finish of that sample is named in the log (the operator may want more room).
#[derive(Debug, Clone)]
pub(crate) struct LimitSet {
    pub sample: u32,
    pub upstream: Arc<str>,
    pub max_tokens: u64,
}

/// An upstream request that answered: its reads, the upstream that answered and the
/// request as its accounting reads it (see [`accounting`]), and the limit the gateway set
/// on it, if it set one.
pub(crate) struct Opened {
    pub reads: futures::stream::BoxStream<'static, Result<bytes::Bytes, ClientError>>,
    pub route: UpstreamRoute,
    pub body: Value,
    pub limit_set: Option<u64>,
}

/// What opening a request needs: shared by a run's first requests and those started later.
#[derive(Clone)]
pub(crate) struct Opener {
    pub models: Models,
    pub model: Arc<ModelRoutes>,
    /// The client's request as Chat Completions, without `model`, `stream` and `n`: its
    /// fields' JSON text, shared by every upstream request of the run.
    pub body: Arc<crate::request::Fields>,
    /// The client's own fields that only an upstream of its API takes as they are
    /// (Anthropic's `thinking`, Responses' `reasoning`), with that API: they replace the
    /// Chat Completions approximation for such an upstream.
    pub native: Option<Arc<(Dialect, Map<String, Value>)>>,
    /// A confidence-guided vote's options: chat upstreams are asked for `logprobs`, and for
    /// `top_logprobs` when its measure reads them (`top_k`).
    pub logprobs: Option<choicewise_core::confidence::Confidence>,
    /// The client asked for log-probabilities itself: an upstream's refusal of them is the
    /// client's error, passed on.
    pub asked_logprobs: bool,
    /// Why some sample of the run went without the vote's log-probabilities: an upstream
    /// refused them (its message), now or within the last hour.
    pub logprobs_refused: Arc<std::sync::OnceLock<String>>,
    pub metrics: Arc<Metrics>,
    /// The requested model's retry budget.
    pub budget: Arc<Budget>,
    /// Every try of the run, in order.
    pub tries: Arc<Mutex<Vec<TryRecord>>>,
    /// The samples whose request the gateway gave a limit the client did not state.
    pub limits_set: Arc<Mutex<Vec<LimitSet>>>,
    /// Who the request comes from (the ejection rules).
    pub client: ClientId,
    /// Upstream requests the run has sent, and the most it may
    /// (`max_upstream_requests_per_request`).
    pub sent: Arc<std::sync::atomic::AtomicUsize>,
    pub max_requests: usize,
    /// The upstream bodies written for the run, one per upstream and number of samples: a
    /// fan-out's samples to one upstream share one body (its bytes, not translated or
    /// written again per sample).
    pub bodies: Bodies,
    /// The answer room reserved for each sample of a request that states no limit, under a
    /// limit of tokens or dollars: sent to an upstream without a `max_tokens` of its own,
    /// so that no answer outgrows what its key was charged for.
    pub room: Option<u64>,
    /// The room each sample's output is held to when a limit counts tokens or dollars (the
    /// room its reservation counted): a sample past it is stopped there, its finish
    /// `length`, however its upstream treats the `max_tokens` it was sent.
    pub bound: Option<u64>,
}

/// Whether `u` serves `samples` samples in one request.
fn serves(u: &UpstreamRoute, samples: usize) -> bool {
    samples == 1
        || (u.api.has_n()
            && u.n_mode == NMode::Native
            && u.max_n.is_none_or(|max| samples <= max as usize))
}

/// A failed try: its upstream, how it failed, the wait it asked for, and its message.
struct Failed {
    upstream: Arc<str>,
    outcome: Outcome,
    retry_after: Option<Duration>,
    message: String,
}

impl Opener {
    /// Notes that a sample to `route` goes without the vote's log-probabilities, which it
    /// refused for requests of `shape` (`said`: its message): the answer's
    /// `confidence.unavailable` says so when no sample carried them.
    fn without_logprobs(&self, route: &UpstreamRoute, shape: Shape, said: &str) {
        self.logprobs_refused.get_or_init(|| {
            format!(
                "upstream {} refuses log-probabilities for {}: {said}",
                route.label,
                shape.words()
            )
        });
    }

    /// Records one try of `sample` (and counts it in the metrics).
    pub fn record(&self, sample: u32, upstream: &Arc<str>, outcome: Outcome) {
        self.metrics
            .tried(&self.model.name, upstream, outcome.as_str());
        (self.tries.lock().unwrap_or_else(|p| p.into_inner())).push(TryRecord {
            sample,
            upstream: upstream.clone(),
            outcome,
            at: std::time::Instant::now(),
        });
    }

    /// Opens the request for `samples`, first at the model's upstream `first`: its tries as
    /// the model's rules say, then each fallback model's. The client's own error (a 4xx
    /// other than 408 and 429) ends the tries at once and is passed through.
    pub async fn open(&self, first: usize, samples: &[u32]) -> Result<Opened, ApiError> {
        let sample = samples.first().copied().unwrap_or(0);
        let mut failed: Vec<Failed> = Vec::new();
        let mut chain = vec![self.model.clone()];
        chain.extend(
            (self.model.fallbacks.iter()).filter_map(|name| self.models.get(name).cloned()),
        );
        let mut first_try = true;
        for (m, model) in chain.iter().enumerate() {
            let candidates: Vec<usize> = (0..model.routes.len())
                .filter(|&j| serves(&model.routes[j], samples.len()))
                .collect();
            if candidates.is_empty() {
                continue;
            }
            if m > 0 {
                self.metrics.fallback(&self.model.name, &model.name);
                if let Some(left_out) = self.model.warnings.allow("fallback", Instant::now()) {
                    tracing::warn!(model = %self.model.name, to = %model.name, left_out, "falling back");
                }
            }
            let start = match m {
                0 => candidates.iter().position(|&j| j == first).unwrap_or(0),
                _ => 0,
            };
            let mut last: Option<usize> = None;
            for attempt in 0..model.retry.attempts {
                let now = Instant::now();
                let retry = !std::mem::take(&mut first_try);
                if !retry {
                    self.budget.first(now);
                }
                // The next upstream after the last one tried that may be tried now; else
                // the one free soonest, if that is within the longest wait.
                let from = last.and_then(|l| candidates.iter().position(|&j| j == l));
                let from = from.map_or(start, |p| p + 1);
                let order =
                    (0..candidates.len()).map(|k| candidates[(from + k) % candidates.len()]);
                let mut chosen = None;
                // Whether the chosen try is an ejected upstream's probe.
                let mut probe = false;
                let mut soonest: Option<(usize, Instant)> = None;
                // A first try whose planned upstream cannot be tried goes to one of those that
                // can, by its sample number: an ejected upstream's share is spread over the
                // others rather than falling on its neighbour alone.
                let closed =
                    |j: usize| matches!(model.routes[j].health.peek(now), Availability::Until(_));
                // Envoy's panic threshold: when every upstream of the model is ejected, they
                // are tried anyway (in turn, as healthy ones are) rather than none at all, so
                // that no burst of failures, whoever's, takes a whole model out.
                let panic = (candidates.iter()).all(|&j| model.routes[j].health.ejected());
                if panic && last.is_none() {
                    self.metrics.panic_routed(&model.name);
                    if let Some(left_out) = model.warnings.allow("panic_routed", now) {
                        tracing::warn!(
                            model = %model.name,
                            left_out,
                            "every upstream is ejected: trying them anyway"
                        );
                    }
                }
                if last.is_none() && closed(candidates[start]) {
                    let open: Vec<usize> = (candidates.iter().copied())
                        .filter(|&j| !closed(j))
                        .collect();
                    if !open.is_empty() {
                        let j = open[sample as usize % open.len()];
                        // Taken as the loop below would (a probe is handed out once).
                        match model.routes[j].health.take(now) {
                            Availability::Until(_) => {}
                            taken => {
                                chosen = Some(j);
                                probe = taken == Availability::Probe;
                            }
                        }
                    }
                }
                for j in order.filter(|_| chosen.is_none()) {
                    if panic && !matches!(model.routes[j].health.peek(now), Availability::Probe) {
                        // Tried as if healthy: not its probe (which a success would end
                        // anyway), and a failure does not lengthen its ejection.
                        chosen = Some(j);
                        break;
                    }
                    match model.routes[j].health.take(now) {
                        taken @ (Availability::Healthy | Availability::Probe) => {
                            chosen = Some(j);
                            probe = taken == Availability::Probe;
                            break;
                        }
                        Availability::Until(t) => {
                            if soonest.is_none_or(|(_, s)| t < s) {
                                soonest = Some((j, t));
                            }
                        }
                    }
                }
                // A retry is charged to the budget, unless it leaves an ejected upstream for
                // one whose last try succeeded: that moves a try away from an upstream known
                // to be failing to one known to answer, and it is what a burst meets while
                // one upstream is going down (every try already sent to it fails). Leaving
                // an ejected upstream for one not known to answer (in an outage of every
                // upstream, the next to be ejected) is charged as any retry, so that the
                // budget bounds the tries of an outage.
                let leaves_ejected = !panic
                    && last.is_some_and(|l| model.routes[l].health.ejected())
                    && chosen
                        .is_some_and(|j| Some(j) != last && model.routes[j].health.answering())
                    && !probe;
                if retry && !leaves_ejected && !self.budget.retry(now) {
                    let probed = chosen.filter(|_| probe).map(|j| &model.routes[j]);
                    return Err(self.budget_refused(&failed, probed, "model"));
                }
                let j = match (chosen, soonest) {
                    (Some(j), _) => {
                        if Some(j) == last {
                            tokio::time::sleep(model.retry.backoff(attempt)).await;
                        }
                        j
                    }
                    (None, Some((j, t))) if t - now <= model.retry.max_backoff => {
                        tokio::time::sleep(t - now).await;
                        // Taken now as any try is: an ejected upstream still gets one probe
                        // at a time.
                        match model.routes[j].health.take(Instant::now()) {
                            Availability::Until(_) => break,
                            taken => {
                                probe = taken == Availability::Probe;
                                j
                            }
                        }
                    }
                    _ => break,
                };
                last = Some(j);
                let route = &model.routes[j];
                // The upstream's own budget, beside its model's: a try that moves away from
                // an ejected upstream to one that answers is free in both, but any other retry sent to this
                // upstream, from its model or from a model falling back to it, is bounded
                // by the first tries it serves, so that no other model's failures flood it.
                let now = Instant::now();
                if !retry {
                    route.budget.first(now);
                } else if !leaves_ejected && !route.budget.retry(now) {
                    let probed = probe.then_some(route);
                    return Err(self.budget_refused(&failed, probed, &route.label));
                }
                // Every upstream request of the run counts against one bound.
                let sent = self.sent.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                if sent >= self.max_requests {
                    if probe {
                        route.health.probe_over();
                    }
                    if let Some(left_out) = self.model.warnings.allow("bound", now) {
                        tracing::warn!(
                            model = %self.model.name,
                            max_upstream_requests_per_request = self.max_requests,
                            left_out,
                            "a request reached its bound of upstream requests"
                        );
                    }
                    return Err(self.too_many_requests(&failed));
                }
                // Whatever ends this try (an answer, a failure, the client's own error, or
                // this future dropped: a client gone, a sample cancelled), a probe it was is
                // over: the next one may go.
                let _probe = probe.then(|| ProbeDone(&route.health));
                // A confidence-guided vote asks an upstream whose choices carry them (Chat
                // Completions') for log-probabilities, unless it refused them for a request
                // of this shape.
                let mut logprobs = self.logprobs.is_some() && route.api.api().has_logprobs();
                // Read only where log-probabilities are asked (a confidence vote).
                let shape = match logprobs {
                    true => Shape::of(&self.body),
                    false => Shape::Plain,
                };
                if logprobs && let Some(said) = route.refusals.refused(shape, Instant::now()) {
                    logprobs = false;
                    self.without_logprobs(route, shape, &said);
                }
                let tried = loop {
                    let text = shared_body(route, self, samples.len(), logprobs)?;
                    // The try succeeds on its first byte of body, not on its headers: a
                    // server that answers 200 and then holds its first event is a failed
                    // try too.
                    let tried = tokio::time::timeout(model.retry.first_byte_timeout, async {
                        let mut reads =
                            futures::StreamExt::boxed(route.client.stream_json(text).await?);
                        let first = futures::StreamExt::next(&mut reads).await;
                        let first = futures::stream::iter(first);
                        Ok::<_, ClientError>(futures::StreamExt::boxed(futures::StreamExt::chain(
                            first, reads,
                        )))
                    })
                    .await;
                    // Log-probabilities refused that the gateway asked for on its own: asked
                    // again without them, at once (the same upstream, no retry spent), and
                    // remembered for the next request of this shape.
                    let refused = match &tried {
                        Ok(Err(e)) if logprobs && !self.asked_logprobs => refuses_logprobs(e),
                        _ => None,
                    };
                    let Some(said) = refused else { break tried };
                    self.record(sample, &route.label, Outcome::Refused);
                    route.refusals.remember(shape, said.clone(), Instant::now());
                    tracing::warn!(
                        model = %model.name,
                        upstream = %route.label,
                        shape = shape.words(),
                        "the upstream refused log-probabilities: a confidence-guided vote \
                         goes on without them for such requests (for an hour): {said}"
                    );
                    self.without_logprobs(route, shape, &said);
                    logprobs = false;
                    if self.sent.fetch_add(1, std::sync::atomic::Ordering::AcqRel)
                        >= self.max_requests
                    {
                        return Err(self.too_many_requests(&failed));
                    }
                };
                let (outcome, retry_after, message) = match tried {
                    Ok(Ok(reads)) => {
                        if route.health.succeeded(self.client, Instant::now()) {
                            self.metrics.ejected(&route.label, false);
                            tracing::info!(upstream = %route.label, "restored after a probe");
                        }
                        self.record(sample, &route.label, Outcome::Ok);
                        return Ok(Opened {
                            reads,
                            route: route.clone(),
                            body: accounting(route, samples.len()),
                            limit_set: limit_to_set(route, &self.body, self.room),
                        });
                    }
                    Ok(Err(e)) => match classify(&e) {
                        None => {
                            // The upstream answered: it is healthy, the request was refused.
                            route.health.succeeded(self.client, Instant::now());
                            self.record(sample, &route.label, Outcome::Refused);
                            return Err(upstream_error(&model.name, route, &e, samples.len()));
                        }
                        Some(outcome) => (outcome, e.retry_after(), why(&e)),
                    },
                    Err(_) => (
                        Outcome::Timeout,
                        None,
                        format!(
                            "no first byte within {}s (first_byte_timeout_s)",
                            model.retry.first_byte_timeout.as_secs_f64()
                        ),
                    ),
                };
                self.record(sample, &route.label, outcome);
                if let Some(left_out) = model.warnings.allow("try_failed", Instant::now()) {
                    tracing::warn!(
                        model = %model.name,
                        upstream = %route.label,
                        outcome = outcome.as_str(),
                        left_out,
                        "a try failed: {message}"
                    );
                }
                if (route.health).failed(Instant::now(), retry_after, probe, self.client, outcome) {
                    self.metrics.ejected(&route.label, true);
                    tracing::warn!(upstream = %route.label, "ejected");
                }
                failed.push(Failed {
                    upstream: route.label.clone(),
                    outcome,
                    retry_after,
                    message,
                });
            }
        }
        Err(self.failure(&failed, false))
    }
}

/// Ends a probe when dropped, however its try ended ([`Health::probe_over`]).
struct ProbeDone<'a>(&'a Health);

impl Drop for ProbeDone<'_> {
    fn drop(&mut self) {
        self.0.probe_over();
    }
}

/// Counts an upstream response in the open-connections gauge for as long as it is read.
pub(crate) fn counted<S, T>(
    reads: S,
    metrics: &Arc<Metrics>,
) -> impl futures::Stream<Item = T> + Send + 'static
where
    S: futures::Stream<Item = T> + Send + 'static,
{
    let open = metrics.open_upstream();
    reads.map(move |read| {
        let _open = &open;
        read
    })
}
