//! Opening one planned upstream request: its tries over the model's upstreams, then over
//! each fallback model's, as [`crate::upstream::resilience`] rules; and the error the client gets
//! when none succeeded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use choicewise_client::{ClientError, ClientErrorKind};
use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::config::NMode;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::upstream::resilience::{
    Availability, Budget, ClientId, Health, Outcome, RetryPolicy, Warnings, classify,
};
use choicewise_client::Client;
use choicewise_core::Dialect;

/// A configured model's upstream, ready to call.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamRoute {
    pub api: Dialect,
    pub client: Client,
    /// The upstream's model name.
    pub model: String,
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
pub(crate) type Models = Arc<HashMap<String, Arc<ModelRoutes>>>;

/// One try, for the final `choicewise` object's `tries`.
#[derive(Debug, Clone)]
pub(crate) struct TryRecord {
    pub sample: u32,
    pub upstream: Arc<str>,
    pub outcome: Outcome,
    /// When it ended (its event's time in the request's span).
    pub at: std::time::SystemTime,
}

/// A limit the gateway set on a sample's request, the client having stated none: a `length`
/// finish of that sample is named in the log (the operator may want more room).
#[derive(Debug, Clone)]
pub(crate) struct LimitSet {
    pub sample: u32,
    pub upstream: Arc<str>,
    pub max_tokens: u64,
}

/// The answer room a request for upstream `u` is given when its body (`base`) states no
/// limit of its own: `u`'s `max_tokens`; None when the client stated one, or `u` has none.
fn limit_to_set(u: &UpstreamRoute, base: &crate::request::Fields) -> Option<u64> {
    let stated = ["max_tokens", "max_completion_tokens"]
        .iter()
        .any(|k| base.get(*k).is_some_and(|v| &v[..] != b"null"));
    u.max_tokens.filter(|_| !stated)
}

/// An upstream request that answered: its reads, the upstream that answered and the
/// request as its accounting reads it (see [`request_body`]), and the limit the gateway set
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
    /// A confidence-guided vote's `top_logprobs`: chat upstreams are asked for them.
    pub logprobs: Option<usize>,
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
}

/// The bodies of a run's upstream requests ([`Opener::bodies`]): by upstream (its label and
/// model) and number of samples, each written once, by the first request that needs it
/// (the others wait for it).
pub(crate) type Bodies = Arc<Mutex<Vec<(BodyKey, Arc<std::sync::OnceLock<BodyText>>)>>>;

/// What a body of [`Bodies`] is written for: an upstream's label and model, and the samples.
type BodyKey = (Arc<str>, String, usize);

/// A body written, or why it could not be.
type BodyText = Result<bytes::Bytes, ApiError>;

/// [`request_body`], written once per upstream and number of samples in a run and shared
/// by every request that sends it ([`Opener::bodies`]).
fn shared_body(u: &UpstreamRoute, opener: &Opener, samples: usize) -> BodyText {
    let key: BodyKey = (u.label.clone(), u.model.clone(), samples);
    let cell = {
        let mut bodies = opener.bodies.lock().unwrap_or_else(|e| e.into_inner());
        match bodies.iter().find(|(k, _)| *k == key) {
            Some((_, cell)) => cell.clone(),
            None => {
                let cell = Arc::default();
                bodies.push((key, Arc::clone(&cell)));
                cell
            }
        }
    };
    cell.get_or_init(|| request_body(u, opener, samples))
        .clone()
}

/// The body of a request for `samples` samples to upstream `u`, in its API, as JSON text.
///
/// A Chat Completions upstream's body is the client's fields as they came, with the fields
/// the gateway decides written over them: nothing of it is parsed. Another API's is
/// translated ([`Dialect::request_from_chat`]) from a parsed copy of the few fields it
/// reshapes, its messages and tools translated from their text one at a time
/// ([`Dialect::write_messages_from_chat_json`], [`Dialect::tools_from_chat_json`]): a request of
/// many messages is never a tree. A request that states no limit gets the upstream's
/// `max_tokens` ([`limit_to_set`]).
pub(crate) fn request_body(
    u: &UpstreamRoute,
    opener: &Opener,
    samples: usize,
) -> Result<bytes::Bytes, ApiError> {
    let (base, logprobs) = (&*opener.body, opener.logprobs);
    if u.api == Dialect::Chat {
        let model = serde_json::to_vec(&u.model).map_err(|e| ApiError::invalid(e.to_string()))?;
        let mut over: Vec<(&str, Vec<u8>)> = vec![
            ("model", model),
            ("stream", b"true".to_vec()),
            ("stream_options", br#"{"include_usage":true}"#.to_vec()),
        ];
        if samples > 1 {
            over.push(("n", samples.to_string().into_bytes()));
        }
        if let Some(limit) = limit_to_set(u, base) {
            over.push(("max_tokens", limit.to_string().into_bytes()));
        }
        if let Some(k) = logprobs {
            let asked = (base.get("top_logprobs"))
                .and_then(|t| serde_json::from_slice::<Value>(t).ok())
                .and_then(|t| t.as_u64())
                .unwrap_or(0);
            over.push(("logprobs", b"true".to_vec()));
            over.push(("top_logprobs", asked.max(k as u64).to_string().into_bytes()));
        }
        let over: Vec<(&str, &[u8])> = over.iter().map(|(k, v)| (*k, &v[..])).collect();
        return Ok(crate::request::write_object(base, &over).into());
    }
    let native = (opener.native.as_deref()).filter(|(api, _)| *api == u.api);
    let translated = translated_body(
        u.api,
        &u.model,
        base,
        native.map(|n| &n.1),
        limit_to_set(u, base),
    )?;
    Ok(translated.into())
}

/// [`request_body`] for an upstream of API `api` other than Chat Completions, for its model
/// `model`: the client's fields `base`, the client's own fields of that API (`native`) and
/// the limit the gateway sets (`limit`).
fn translated_body(
    api: Dialect,
    model: &str,
    base: &crate::request::Fields,
    native: Option<&Map<String, Value>>,
    limit: Option<u64>,
) -> Result<Vec<u8>, ApiError> {
    // What the translation reads or reshapes is parsed, but for the messages and the tools,
    // translated one at a time from their text (the tools' schemas copied); every other
    // field passes through as the client sent it.
    let mut body = Map::new();
    for (k, text) in base
        .iter()
        .filter(|(k, _)| TRANSLATED.contains(&k.as_str()) && *k != "messages")
    {
        body.insert(
            k.clone(),
            crate::request::parse_field(k, text).map_err(ApiError::invalid)?,
        );
    }
    if let Some(native) = native {
        body.extend(native.clone());
    }
    if let Some(limit) = limit {
        body.entry("max_tokens").or_insert(json!(limit));
    }
    body.insert("model".into(), json!(model));
    body.insert("stream".into(), json!(true));
    let Value::Object(body) = api
        .request_from_chat(&Value::Object(body))
        .map_err(ApiError::invalid)?
    else {
        return Err(ApiError::invalid("the translated request is not an object"));
    };
    let mut fields = crate::request::fields_of(body);
    let (list_key, system_key) = (api.messages_field(), api.system_field());
    fields.remove(list_key);
    for (k, text) in base {
        if !TRANSLATED.contains(&k.as_str()) && k != "tools" {
            // A field the translation writes itself (`system`, `input`, ...) is its own.
            fields.entry(k.clone()).or_insert_with(|| text.clone());
        }
    }
    let messages = base.get("messages").map_or(&b"[]"[..], |m| &m[..]);
    // The tools translated straight into the body at their key (never a list of their own
    // beside it), about the size the client's are; their error, if any, is given at their
    // key (after the messages').
    let tools = base.get("tools").filter(|t| &t[..] != b"null");
    // The body is written in its keys' order, the messages translated into it as they are
    // read: a first system message's content is known once the list is written, before its
    // own key (`system` after `messages`, `instructions` after `input`).
    let mut keys: Vec<&str> = (fields.keys().map(String::as_str))
        .chain([list_key])
        .chain(system_key)
        .chain(tools.map(|_| "tools"))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let size = (fields.iter().map(|(k, v)| k.len() + v.len() + 4)).sum::<usize>()
        + messages.len()
        + messages.len() / 8
        + tools.map_or(0, |t| t.len() + t.len() / 8)
        + 64;
    let mut out = Vec::with_capacity(size);
    out.push(b'{');
    let mut system: Option<Vec<u8>> = None;
    for key in keys {
        let piece = if key == list_key {
            Piece::Messages
        } else if Some(key) == system_key
            && let Some(text) = system.take()
        {
            Piece::Owned(text)
        } else if key == "tools"
            && let Some(tools) = tools
        {
            Piece::Tools(tools)
        } else {
            match fields.get(key) {
                Some(text) => Piece::Text(text),
                None => continue,
            }
        };
        if out.len() > 1 {
            out.push(b',');
        }
        // A string always serialises.
        let _ = serde_json::to_writer(&mut out, key);
        out.push(b':');
        match piece {
            Piece::Text(text) => out.extend_from_slice(text),
            Piece::Owned(text) => out.extend_from_slice(&text),
            Piece::Messages => {
                system = api
                    .write_messages_from_chat_json(messages, &mut out)
                    .map_err(|e| ApiError::invalid(e.to_string()).param(e.field()))?;
            }
            Piece::Tools(tools) => {
                (api.write_tools_from_chat_json(tools, &mut out)).map_err(ApiError::invalid)?
            }
        }
    }
    out.push(b'}');
    Ok(out)
}

/// A field of a translated body, as [`translated_body`] writes it.
enum Piece<'a> {
    /// Its text, as the client sent it or the translation wrote it.
    Text(&'a [u8]),
    /// Its text, made here (the first system message's content).
    Owned(Vec<u8>),
    /// The messages, translated into the body as they are read.
    Messages,
    /// The client's tools (their text), translated into the body as they are read.
    Tools(&'a [u8]),
}

/// The Chat Completions fields [`Dialect::request_from_chat`] reads or reshapes for another
/// API (the rest it passes on as they are).
const TRANSLATED: [&str; 16] = [
    "n",
    "stream_options",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "tool_choice",
    "reasoning_effort",
    "parallel_tool_calls",
    "prompt_cache_key",
    "user",
    "safety_identifier",
    "service_tier",
    "thinking",
    "reasoning",
];

/// The request for `samples` samples to upstream `u` as the library reads it for their
/// accounting: the upstream's `model`, the request's `n`.
pub(crate) fn accounting(u: &UpstreamRoute, samples: usize) -> Value {
    let mut request = json!({"model": u.model});
    if u.api == Dialect::Chat && samples > 1 {
        request["n"] = json!(samples);
    }
    request
}

/// Whether `u` serves `samples` samples in one request.
fn serves(u: &UpstreamRoute, samples: usize) -> bool {
    samples == 1
        || (u.api == Dialect::Chat
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
    /// Records one try of `sample` (and counts it in the metrics).
    pub fn record(&self, sample: u32, upstream: &Arc<str>, outcome: Outcome) {
        self.metrics
            .tried(&self.model.name, upstream, outcome.as_str());
        (self.tries.lock().unwrap_or_else(|p| p.into_inner())).push(TryRecord {
            sample,
            upstream: upstream.clone(),
            outcome,
            at: std::time::SystemTime::now(),
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
                let text = shared_body(route, self, samples.len())?;
                // The try succeeds on its first byte of body, not on its headers: a server
                // that answers 200 and then holds its first event is a failed try too.
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
                            limit_set: limit_to_set(route, &self.body),
                        });
                    }
                    Ok(Err(e)) => match classify(&e) {
                        None => {
                            // The upstream answered: it is healthy, the request was refused.
                            route.health.succeeded(self.client, Instant::now());
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

    /// The answer when the run reached `max_upstream_requests_per_request`: 502 naming the
    /// bound, and the tries that failed before it.
    fn too_many_requests(&self, failed: &[Failed]) -> ApiError {
        let mut e = self.failure(failed, false);
        let bound = format!(
            "model {:?}: the request reached its bound of {} upstream requests (max_upstream_requests_per_request)",
            self.model.name, self.max_requests
        );
        e.status = StatusCode::BAD_GATEWAY;
        e.message = match failed.is_empty() {
            true => bound,
            false => format!("{bound}; {}", e.message),
        };
        e.code("upstream_requests_bound")
    }

    /// The answer when every try failed: 429 with the smallest `Retry-After` when every
    /// try was a 429, else 502 listing each try.
    /// A retry a budget refused (`budget`: `model`, or the upstream's label): the probe it
    /// was handed out, if any, is not made (the next try may probe); counted, logged, and
    /// the client's error says the budget is spent.
    fn budget_refused(
        &self,
        failed: &[Failed],
        probed: Option<&UpstreamRoute>,
        budget: &str,
    ) -> ApiError {
        if let Some(route) = probed {
            route.health.probe_over();
        }
        self.metrics.retry_budget_exhausted();
        if let Some(left_out) = self.model.warnings.allow("budget", Instant::now()) {
            tracing::warn!(model = %self.model.name, budget, left_out, "retry budget exhausted");
        }
        self.failure(failed, true)
    }

    fn failure(&self, failed: &[Failed], budget: bool) -> ApiError {
        let name = &self.model.name;
        if !failed.is_empty() && failed.iter().all(|f| f.outcome == Outcome::TooMany) {
            let wait = (failed.iter())
                .filter_map(|f| f.retry_after)
                .min()
                .map(|w| w.min(Duration::from_secs(300)));
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!("model {name:?}: every upstream answered 429; retry later"),
            )
            .code("upstream_rate_limited");
            e.retry_after = wait.map(|w| w.as_secs_f64().ceil() as u64);
            return e;
        }
        let tries: Vec<String> = (failed.iter())
            .map(|f| format!("{} {} ({})", f.upstream, f.outcome.as_str(), f.message))
            .collect();
        let mut message = match tries.is_empty() {
            true => format!("model {name:?}: no upstream could be tried (every one is ejected)"),
            false => format!(
                "model {name:?}: every try failed before a first byte: {}",
                tries.join("; ")
            ),
        };
        if budget {
            message.push_str("; the retry budget is spent, so no more tries were made");
        }
        ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", message).code("upstream_failed")
    }
}

/// Ends a probe when dropped, however its try ended ([`Health::probe_over`]).
struct ProbeDone<'a>(&'a Health);

impl Drop for ProbeDone<'_> {
    fn drop(&mut self) {
        self.0.probe_over();
    }
}

/// A failed try's cause, naming no URL (which may hold credentials).
fn why(e: &ClientError) -> String {
    match e.kind() {
        ClientErrorKind::Connect => format!("could not connect: {}", e.message()),
        ClientErrorKind::Timeout => "no answer in time".to_string(),
        _ => e.to_string(),
    }
}

/// The error a failed upstream request is to the client: its own 4xx passed through with the
/// upstream named, anything else (a 3xx, a refused connection, a timeout) a 502 naming the
/// model, the upstream's API and host. A 400 to a request of `samples` > 1 in one (native
/// `n`) says how many were asked, and names `max_n`: the likely cause is a provider serving
/// fewer per request.
pub(crate) fn upstream_error(
    model: &str,
    u: &UpstreamRoute,
    e: &ClientError,
    samples: usize,
) -> ApiError {
    match e.status() {
        // The upstream refused the gateway's own credentials: the gateway's failure, not the
        // client's (whose SDK would blame its own key), and the provider's message is left
        // out (it may quote part of the key).
        Some(status @ (401 | 403 | 407)) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            format!(
                "model {model:?}: the {} upstream at {} refused the gateway's credentials ({status})",
                u.api, u.host
            ),
        )
        .code("upstream_credentials"),
        Some(status @ 400..=499) => {
            let error_field = |key: &str| {
                e.body()
                    .and_then(|b| b.pointer(&format!("/error/{key}")))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            let mut message = format!(
                "the {} upstream {} answered {status}: {}",
                u.api,
                u.host,
                e.message()
            );
            if status == 400 && samples > 1 {
                let limit = match u.max_n {
                    Some(max) => format!("its max_n is {max}"),
                    None => "it has no max_n".to_string(),
                };
                message.push_str(&format!(
                    " (model {model:?} asked it for {samples} samples in one request with n = {samples}, \
                     and {limit}: if it serves fewer per request, set max_n on that upstream \
                     in the config, or n = \"fan-out\")"
                ));
            }
            let mut error = ApiError::new(
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
                "upstream_error",
                message,
            );
            error.code = error_field("code");
            if let Some(kind) = error_field("type") {
                // The provider's own type, kept when it is one of the usual words.
                error.kind = match kind.as_str() {
                    "invalid_request_error" => "invalid_request_error",
                    "authentication_error" => "authentication_error",
                    "permission_error" => "permission_error",
                    "not_found_error" => "not_found_error",
                    "rate_limit_error" | "rate_limit_exceeded" => "rate_limit_error",
                    _ => "upstream_error",
                };
            }
            error
        }
        _ => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            format!(
                "model {model:?}: the {} upstream at {} failed before its stream began: {}",
                u.api,
                u.host,
                why(e)
            ),
        )
        .code("upstream_failed"),
    }
}

/// An upstream's reads, a failure after the first byte recorded as a `cut` try.
pub(crate) fn cuts(
    reads: futures::stream::BoxStream<
        'static,
        Result<bytes::Bytes, choicewise_client::ClientError>,
    >,
    opener: &Opener,
    sample: u32,
    label: &Arc<str>,
) -> impl futures::Stream<Item = Result<bytes::Bytes, choicewise_client::ClientError>> + Send + 'static
{
    let (opener, label) = (opener.clone(), label.clone());
    let mut cut = false;
    reads.inspect(move |read| {
        if read.is_err() && !std::mem::replace(&mut cut, true) {
            opener.record(sample, &label, crate::upstream::resilience::Outcome::Cut);
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Fields, fields_of, split_object, write_object};

    /// The translated body as it was written before the messages were translated from their
    /// text: every field the translation reads parsed, the whole request translated as a
    /// tree, its tools then written from their text, the other fields passed on.
    fn as_a_tree(
        api: Dialect,
        base: &Fields,
        native: Option<&Map<String, Value>>,
        limit: Option<u64>,
    ) -> Result<Vec<u8>, String> {
        let mut body = Map::new();
        for (k, text) in base
            .iter()
            .filter(|(k, _)| TRANSLATED.contains(&k.as_str()))
        {
            body.insert(k.clone(), serde_json::from_slice(text).unwrap());
        }
        if let Some(native) = native {
            body.extend(native.clone());
        }
        if let Some(limit) = limit {
            body.entry("max_tokens").or_insert(json!(limit));
        }
        body.insert("model".into(), json!("up"));
        body.insert("stream".into(), json!(true));
        let Value::Object(body) = api.request_from_chat(&Value::Object(body))? else {
            unreachable!()
        };
        let mut fields = fields_of(body);
        if let Some(tools) = base.get("tools").filter(|t| &t[..] != b"null") {
            fields.insert("tools".into(), api.tools_from_chat_json(tools)?.into());
        }
        for (k, text) in base {
            if !TRANSLATED.contains(&k.as_str()) && k != "tools" {
                fields.entry(k.clone()).or_insert_with(|| text.clone());
            }
        }
        Ok(write_object(&fields, &[]))
    }

    #[test]
    fn translated_bodies_are_written_as_the_tree_was() {
        let messages = json!([
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "what is it?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function",
                "function": {"name": "w", "arguments": "{\"c\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "18C"},
            {"role": "tool", "tool_call_id": "b", "content": "19C"},
            {"role": "system", "content": "later"},
            {"role": "assistant", "content": "Done."}]);
        let tools = json!([{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]);
        let bodies = [
            json!({"messages": messages, "tools": tools, "tool_choice": "required", "stop": "x",
                   "max_tokens": 50, "metadata": {"a": 1}, "temperature": 0.5}),
            // A client's own `system` or `instructions` field: the first system message wins.
            json!({"messages": messages, "system": "own", "instructions": "own", "input": [1],
                   "zz": null, "reasoning_effort": "low", "max_completion_tokens": 3000}),
            json!({"messages": [{"role": "user", "content": "hi"}], "system": "own",
                   "instructions": "own", "tools": null}),
            json!({"messages": [], "parallel_tool_calls": false, "user": "u", "seed": null}),
            json!({"tools": tools}),
        ];
        let thinking: Map<String, Value> = serde_json::from_value(
            json!({"thinking": {"type": "enabled", "budget_tokens": 1500},
                "reasoning": {"effort": "low", "summary": "auto"}}),
        )
        .unwrap();
        // A first system message is known once the list is written: its key comes after.
        for api in [Dialect::Anthropic, Dialect::Responses] {
            assert!(Some(api.messages_field()) < api.system_field(), "{api}");
        }
        let mut compared = 0;
        for body in bodies {
            let base = split_object(&bytes::Bytes::from(body.to_string())).unwrap();
            for api in [Dialect::Anthropic, Dialect::Responses] {
                for (native, limit) in [(None, None), (Some(&thinking), Some(9000))] {
                    let text = translated_body(api, "up", &base, native, limit);
                    match (text, as_a_tree(api, &base, native, limit)) {
                        (Ok(text), Ok(tree)) => {
                            assert_eq!(
                                String::from_utf8(text).unwrap(),
                                String::from_utf8(tree).unwrap(),
                                "{api}: {body}"
                            );
                            compared += 1;
                        }
                        (Err(e), Err(tree)) => assert_eq!(e.message, tree, "{api}: {body}"),
                        (text, tree) => panic!("{api}: {body}: {text:?} but {tree:?}"),
                    }
                }
            }
        }
        // All but the Responses requests with a `stop`, which it has not.
        assert_eq!(compared, 18);
        // Messages that are not a list: a 400 naming the field, as the tree refuses them.
        let not_a_list = json!({"messages": "not a list"});
        let base = split_object(&bytes::Bytes::from(not_a_list.to_string())).unwrap();
        for api in [Dialect::Anthropic, Dialect::Responses] {
            let e = translated_body(api, "up", &base, None, None).unwrap_err();
            let tree = as_a_tree(api, &base, None, None).unwrap_err();
            assert_eq!((e.status.as_u16(), &e.message), (400, &tree));
            assert_eq!(e.body()["error"]["param"], "messages");
            assert_eq!(tree, "\"messages\" must be an array, not a string");
        }
        // A message the translation refuses: the same 400.
        let bad = json!({"messages": [{"role": "user", "content": "x"}, {"role": "robot"}]});
        let base = split_object(&bytes::Bytes::from(bad.to_string())).unwrap();
        for api in [Dialect::Anthropic, Dialect::Responses] {
            let e = translated_body(api, "up", &base, None, None).unwrap_err();
            let tree = as_a_tree(api, &base, None, None).unwrap_err();
            assert_eq!((e.status.as_u16(), e.message), (400, tree));
        }
    }
}
