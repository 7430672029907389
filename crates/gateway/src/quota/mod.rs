//! The limits of keys, tags and models (`[auth.keys.limits]`, `[auth.tags.limits]`,
//! `[models.limits]`): what a request reserves before any upstream is asked, the refusal
//! (429 naming the limit, its window and when it resets), and the settlement that replaces
//! the reservation by what was counted once the request's samples are over.
//!
//! The counts live in a [`store::Store`]: the process's ([`store::Memory`], the default) or
//! Redis's ([`redis::Redis`], `[state] redis_url`), shared by every replica. Every call to the
//! store is bounded by `state_timeout_ms`; when it fails or is late, `on_state_error` says
//! what the request meets (served uncounted, or 503), and [`Health`] says so in the log once
//! when the failures begin and once when they end, and in `/metrics`.
//!
//! ```text
//! reserve:  requests 1, samples S, tokens S × (prompt + room), usd S × (prompt × in + room × out)
//! settle:   samples started, tokens prompt + completion as counted, usd of those tokens
//! ```

mod headers;
pub(crate) mod redis;
pub(crate) mod store;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;

use crate::config::{Config, ConfigError, NANOS_PER_USD, OnStateError, Price, RateLimit, Resource};
use crate::counter::{Rule, Slots};
use crate::error::ApiError;
use crate::keys::Caller;
use crate::metrics::Metrics;
pub(crate) use headers::RateHeaders;
use headers::duration_text;
use store::{Adjust, Charge, Store, Verdict, Window};

/// The answer room reserved for each sample of a request that states no limit, of a model
/// none of whose upstreams sets `max_tokens`: the settlement replaces it by what was
/// generated.
pub(crate) const ROOM_WITHOUT_LIMIT: u64 = 4096;

/// The wait a refusal asks for when only requests in flight hold its limit, at most, in
/// seconds: they give back what they do not use as they end.
const IN_FLIGHT_WAIT: u64 = 1;

/// What of `amount` of `resource` a reservation holds until its settlement: all of it, but
/// for a request's count of 1, which is what it uses.
fn held_of(resource: Resource, amount: u64) -> u64 {
    match resource {
        Resource::Requests => 0,
        Resource::Samples | Resource::Tokens | Resource::Usd => amount,
    }
}

/// What a request may take: its samples, its prompt's tokens, and the answer room of each
/// sample (the room it asked for, else its model's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Demand {
    pub samples: u64,
    /// The prompt's tokens: counted, or (`prompt_bound`) a bound never below their count.
    pub prompt_tokens: u64,
    /// Whether `prompt_tokens` is a bound: a reservation a limit of tokens or dollars
    /// refuses is then tried again with the prompt counted.
    pub prompt_bound: bool,
    pub room: u64,
}

/// What a request came to: its samples started, and their tokens as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counted {
    pub samples: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Nano-dollars of these tokens at `price` (0 without one), rounded up.
fn nanos(price: Option<Price>, prompt: u64, completion: u64) -> u64 {
    let Some(price) = price else { return 0 };
    // Dollars per million tokens are nano-dollars per thousandth of a token.
    let nanos = (prompt as f64 * price.input_per_million
        + completion as f64 * price.output_per_million)
        * (NANOS_PER_USD / 1e6);
    nanos.ceil() as u64
}

/// What `resource` takes of a request's `demand`.
fn reserved(resource: Resource, demand: Demand, price: Option<Price>) -> u64 {
    let prompt = demand.samples.saturating_mul(demand.prompt_tokens);
    let room = demand.samples.saturating_mul(demand.room);
    match resource {
        Resource::Requests => 1,
        Resource::Samples => demand.samples,
        Resource::Tokens => prompt.saturating_add(room),
        Resource::Usd => nanos(price, prompt, room),
    }
}

/// Whether what `resource` reserves depends on the prompt's tokens.
fn counts_prompt(resource: Resource) -> bool {
    matches!(resource, Resource::Tokens | Resource::Usd)
}

/// What `resource` came to of what a request `counted`.
fn used(resource: Resource, counted: Counted, price: Option<Price>) -> u64 {
    match resource {
        Resource::Requests => 1,
        Resource::Samples => counted.samples,
        Resource::Tokens => counted
            .prompt_tokens
            .saturating_add(counted.completion_tokens),
        Resource::Usd => nanos(price, counted.prompt_tokens, counted.completion_tokens),
    }
}

/// "12 s", "5 min", "3 h 20 min": a wait, rounded up to the second, as a refusal says it.
fn said(seconds: u64) -> String {
    match seconds {
        0..120 => format!("{seconds} s"),
        120..7200 => format!("{} min", seconds.div_ceil(60)),
        _ => {
            let minutes = seconds.div_ceil(60);
            format!("{} h {} min", minutes / 60, minutes % 60)
        }
    }
}

/// Whether the store answers, said once when its failures begin and once when they end.
pub(crate) struct Health {
    failing: AtomicBool,
    since: Mutex<Option<Instant>>,
    metrics: Arc<Metrics>,
    policy: OnStateError,
    /// The store, as the log names it: `redis://127.0.0.1:6379` (without its password).
    store: String,
}

impl Health {
    fn new(metrics: Arc<Metrics>, policy: OnStateError, store: String) -> Health {
        Health {
            failing: AtomicBool::new(false),
            since: Mutex::new(None),
            metrics,
            policy,
            store,
        }
    }

    /// A call (`reserve`, `settle`) failed: counted, and said when it is the first.
    pub(crate) fn failed(&self, op: &'static str, error: &store::StoreError) {
        self.metrics.state_error(op);
        if self.failing.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.since.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.metrics.state_failing(true);
        let then = match self.policy {
            OnStateError::Allow => {
                "requests are served without their limits counted (on_state_error = \"allow\")"
            }
            OnStateError::Refuse => {
                "requests with limits are refused with 503 (on_state_error = \"refuse\")"
            }
        };
        tracing::warn!(
            store = %self.store,
            op,
            error = %error,
            "the shared counts of the limits stopped: {then} until the store answers again"
        );
    }

    /// The store did not answer at start (which was said): failing, without another line.
    fn failing_from_start(&self) {
        if !self.failing.swap(true, Ordering::AcqRel) {
            *self.since.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            self.metrics.state_failing(true);
        }
    }

    /// A call succeeded: said when it ends a run of failures.
    pub(crate) fn answered(&self) {
        if !self.failing.load(Ordering::Acquire) || !self.failing.swap(false, Ordering::AcqRel) {
            return;
        }
        let since = self.since.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.metrics.state_failing(false);
        tracing::info!(
            store = %self.store,
            failing_for_ms = since.map_or(0, |s| s.elapsed().as_millis() as u64),
            "the shared counts of the limits resumed: requests are counted again"
        );
    }
}

/// A model's limits and price, for the requests of it.
struct ModelQuota {
    rules: Vec<Rule>,
    price: Option<Price>,
}

/// The limits of a gateway and the store of their counts.
pub(crate) struct Quota {
    /// The models with limits or a price.
    models: HashMap<String, ModelQuota>,
    store: Arc<dyn Store>,
    timeout: Duration,
    policy: OnStateError,
    health: Arc<Health>,
    /// The store as the log names it: `memory`, or the Redis URL without its password.
    shown: String,
    /// Redis's, to be asked at start.
    redis: Option<Arc<redis::Redis>>,
}

impl Quota {
    /// The limits of `config`'s models (the keys' own are theirs: [`Caller::rules`]),
    /// their counters numbered by `slots`, their counts in the store `[state]` names.
    pub(crate) fn new(
        config: &Config,
        slots: &Slots,
        metrics: Arc<Metrics>,
    ) -> Result<Quota, ConfigError> {
        let models = (config.models.iter())
            .map(|m| {
                let rules = slots.rules("model", &m.name, &m.limits);
                let price = m.price;
                (m.name.clone(), ModelQuota { rules, price })
            })
            .filter(|(_, m)| !m.rules.is_empty() || m.price.is_some())
            .collect();
        let state = &config.state;
        let (shown, redis) = match &state.redis_url {
            None => ("memory".to_string(), None),
            Some(url) => {
                let timeout = Duration::from_millis(state.state_timeout_ms);
                let shown = choicewise_records::shown_url(url);
                (shown, Some(Arc::new(redis::Redis::new(url, timeout)?)))
            }
        };
        let health = Arc::new(Health::new(metrics, state.on_state_error, shown.clone()));
        let store: Arc<dyn Store> = match &redis {
            None => Arc::new(store::Memory::default()),
            Some(redis) => {
                redis.watch(health.clone());
                redis.clone()
            }
        };
        Ok(Quota {
            models,
            store,
            timeout: Duration::from_millis(state.state_timeout_ms),
            policy: state.on_state_error,
            health,
            shown,
            redis,
        })
    }

    /// The limits a request of `caller` for `model` meets, if any.
    pub(crate) fn applicable<'a>(
        &'a self,
        caller: &'a Caller,
        model: &str,
    ) -> Option<Applicable<'a>> {
        let own = caller.rules();
        let model = self.models.get(model);
        let model_rules = model.map_or(&[][..], |m| m.rules.as_slice());
        if own.is_empty() && model_rules.is_empty() {
            return None;
        }
        Some(Applicable {
            rules: own.iter().chain(model_rules).collect(),
            price: model.and_then(|m| m.price),
        })
    }

    /// Reserves what `demand` may take of `applicable`'s limits, before any upstream is
    /// asked: the reservation, settled when the request's samples are over; `None` when the
    /// store failed and `on_state_error = "allow"` serves the request uncounted. A 429 when a
    /// limit would be passed; a 400 when the request alone is more than a limit allows; a
    /// 503 when the store failed and `on_state_error = "refuse"`.
    ///
    /// When `demand`'s prompt is a bound ([`Demand::prompt_bound`]) and a limit of tokens
    /// or dollars refuses it, `count` counts the prompt and the reservation is tried again
    /// with that count: the prompt is counted only where its bound is too close to a limit.
    pub(crate) async fn reserve<F: Future<Output = u64>>(
        &self,
        applicable: Applicable<'_>,
        mut demand: Demand,
        count: impl FnOnce() -> F,
    ) -> Result<Option<Reservation>, ApiError> {
        let Applicable { rules, price } = applicable;
        let mut outcome = self.attempt(&rules, demand, price).await;
        if demand.prompt_bound
            && let Err(Refusal::Limit { index, .. }) = &outcome
            && counts_prompt(rules[*index].limit.resource)
        {
            demand.prompt_tokens = count().await;
            demand.prompt_bound = false;
            outcome = self.attempt(&rules, demand, price).await;
        }
        outcome.map_err(|refusal| match refusal {
            Refusal::Limit {
                index,
                why: Why::NeverFits(amount),
            } => never_fits(rules[index], amount, demand),
            Refusal::Limit {
                index,
                why:
                    Why::Full {
                        reset_ms,
                        used,
                        in_flight,
                    },
            } => self.refused(rules[index], reset_ms, used, in_flight),
            Refusal::Store(e) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                format!(
                    "the counts of this request's limits could not be read ({e}); \
                     refused, as on_state_error = \"refuse\" says"
                ),
            )
            .code("state_unavailable")
            .wait(1),
        })
    }

    /// One reservation of `demand` of `rules`: [`reserve`](Self::reserve)'s, whose errors
    /// are said by it.
    async fn attempt(
        &self,
        rules: &[&Rule],
        demand: Demand,
        price: Option<Price>,
    ) -> Result<Option<Reservation>, Refusal> {
        let charges: Vec<Charge> = (rules.iter())
            .map(|r| {
                let amount = reserved(r.limit.resource, demand, price);
                Charge {
                    counter: r.counter.clone(),
                    slot: r.slot,
                    window_ms: r.limit.window.millis(),
                    limit: r.limit.amount,
                    amount,
                    hold: held_of(r.limit.resource, amount),
                }
            })
            .collect();
        if let Some(index) = charges.iter().position(|c| c.amount > c.limit) {
            let why = Why::NeverFits(charges[index].amount);
            return Err(Refusal::Limit { index, why });
        }
        let answer = tokio::time::timeout(self.timeout, self.store.reserve(&charges)).await;
        let answer = answer.unwrap_or_else(|_| {
            Err(store::StoreError(format!(
                "no answer within state_timeout_ms ({} ms)",
                self.timeout.as_millis()
            )))
        });
        match answer {
            Ok(Verdict::Reserved { now, windows }) => {
                self.health.answered();
                let rate = RateHeaders::of((rules.iter().zip(&windows)).map(|(rule, w)| {
                    let ends = w.start.saturating_add(rule.limit.window.millis());
                    (rule.limit, w.amount, ends.saturating_sub(now))
                }));
                let held = (rules.iter().zip(charges).zip(windows))
                    .map(|((rule, charge), Window { start, .. })| Held {
                        counter: charge.counter,
                        slot: charge.slot,
                        resource: rule.limit.resource,
                        start,
                        window_ms: charge.window_ms,
                        reserved: charge.amount,
                    })
                    .collect();
                Ok(Some(Reservation {
                    store: self.store.clone(),
                    held,
                    price,
                    settled: false,
                    rate,
                }))
            }
            Ok(Verdict::Refused {
                index,
                reset_ms,
                used,
                in_flight,
            }) => {
                self.health.answered();
                // The store names one of the charges it was given (`applicable` gives one at
                // least).
                let index = if index < rules.len() { index } else { 0 };
                Err(Refusal::Limit {
                    index,
                    why: Why::Full {
                        reset_ms,
                        used,
                        in_flight,
                    },
                })
            }
            Err(e) => {
                self.health.failed("reserve", &e);
                match self.policy {
                    OnStateError::Allow => Ok(None),
                    OnStateError::Refuse => Err(Refusal::Store(e)),
                }
            }
        }
    }

    /// The 429 of `rule`, whose window ends in `reset_ms`. When only requests in flight
    /// hold it (`in_flight`: what they reserved, not yet what they used), the wait is
    /// [`IN_FLIGHT_WAIT`] or the window's end, whichever is sooner, and said so: they give
    /// back what they do not use as they end.
    fn refused(&self, rule: &Rule, reset_ms: u64, used: u64, in_flight: bool) -> ApiError {
        let reset = reset_ms.div_ceil(1000).max(1);
        let wait = if in_flight {
            reset.min(IN_FLIGHT_WAIT)
        } else {
            reset
        };
        self.health
            .metrics
            .limit_refused(&rule.label, rule.limit.name());
        let message = if in_flight && wait < reset {
            format!(
                "{} of {} ({}) is held by requests in flight; retry in {} (the window resets in {})",
                rule.limit.name(),
                rule.scope,
                rule.limit.stated(),
                said(wait),
                said(reset)
            )
        } else {
            format!(
                "{} of {} ({}) reached; resets in {}",
                rule.limit.name(),
                rule.scope,
                rule.limit.stated(),
                said(wait)
            )
        };
        let rate = RateHeaders::of(std::iter::once((rule.limit, used, reset_ms)));
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
            .code("rate_limit_exceeded")
            .wait(wait)
            .headers(rate.into_pairs())
    }

    /// At start: whether Redis answers within the store's deadline (at least 1 s): `true`
    /// when it did, `false` without Redis. `Err` says why not, naming the store; the store
    /// counts as failing from then (its recovery is said when it comes).
    pub(crate) async fn probe(&self) -> Result<bool, String> {
        let Some(redis) = &self.redis else {
            return Ok(false);
        };
        let deadline = self.timeout.max(Duration::from_secs(1));
        let error = match tokio::time::timeout(deadline, redis.ping()).await {
            Ok(Ok(())) => return Ok(true),
            Ok(Err(e)) => e,
            Err(_) => format!("no answer within {} ms", deadline.as_millis()),
        };
        self.health.failing_from_start();
        self.health.metrics.state_error("probe");
        Err(format!(
            "[state] redis_url {} is unreachable: {error}",
            self.shown
        ))
    }

    /// At start, once Redis answered: a Redis Cluster is refused, naming why (a
    /// reservation's script charges the counters of several scopes at once, whose names
    /// share no hash slot, which a Cluster refuses with `CROSSSLOT`). `Ok` without Redis, or
    /// when the question cannot be answered (then the first reservation says why).
    pub(crate) async fn refuse_cluster(&self) -> Result<(), String> {
        let Some(redis) = &self.redis else {
            return Ok(());
        };
        let deadline = self.timeout.max(Duration::from_secs(1));
        match tokio::time::timeout(deadline, redis.is_cluster()).await {
            Ok(Ok(true)) => Err(format!(
                "[state] redis_url {} is a Redis Cluster node, which the limits do not support \
                 (a reservation charges a key's, its tags' and its model's counters in one \
                 script, and a Cluster refuses keys of several slots): give them one Redis server",
                self.shown
            )),
            _ => Ok(()),
        }
    }

    /// Whether `model` has a price (what a limit of dollars counts).
    pub(crate) fn priced(&self, model: &str) -> bool {
        self.models.get(model).is_some_and(|m| m.price.is_some())
    }

    /// Redis, where the counts live there.
    pub(crate) fn redis(&self) -> Option<&Arc<redis::Redis>> {
        self.redis.as_ref()
    }

    /// What is left of each of `rules` now, as the store counts it (within
    /// `state_timeout_ms`): each limit, what its window holds (and of that, what requests
    /// in flight hold), and when the window resets; a limit no request counted in a running
    /// window has all of it left.
    pub(crate) async fn left(&self, rules: &[Rule]) -> Result<Vec<Left>, String> {
        let peeks: Vec<store::Peek> = (rules.iter())
            .map(|r| store::Peek {
                counter: r.counter.clone(),
                slot: r.slot,
                window_ms: r.limit.window.millis(),
            })
            .collect();
        let seen = tokio::time::timeout(self.timeout, self.store.peek(&peeks)).await;
        let seen = seen
            .map_err(|_| {
                format!(
                    "no answer within state_timeout_ms ({} ms)",
                    self.timeout.as_millis()
                )
            })?
            .map_err(|e| e.0)?;
        Ok((rules.iter().zip(seen.windows))
            .map(|(rule, window)| {
                let (used, held, reset_ms) = match window {
                    Some((start, amount, held)) => {
                        let ends = start.saturating_add(rule.limit.window.millis());
                        (amount, held, Some(ends.saturating_sub(seen.now)))
                    }
                    None => (0, 0, None),
                };
                Left {
                    limit: rule.limit,
                    scope: rule.scope.clone(),
                    used,
                    held,
                    reset_ms,
                }
            })
            .collect())
    }

    /// What the store's failures do (`on_state_error`).
    pub(crate) fn policy(&self) -> OnStateError {
        self.policy
    }

    /// The store, as the log names it.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }
}

/// An amount of `resource` as the admin API says it: dollars as dollars (a count of
/// nano-dollars here), the rest as they are counted.
pub(crate) fn amount_json(resource: Resource, amount: u64) -> serde_json::Value {
    match resource {
        Resource::Usd => serde_json::json!(amount as f64 / NANOS_PER_USD),
        _ => serde_json::json!(amount),
    }
}

/// What is left of one limit ([`Quota::left`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Left {
    pub limit: RateLimit,
    /// "key `team-a`", "tag `batch`".
    pub scope: Arc<str>,
    /// What its window holds, settled and held.
    pub used: u64,
    /// Of `used`, what requests in flight hold.
    pub held: u64,
    /// When its window resets; none when none runs.
    pub reset_ms: Option<u64>,
}

impl Left {
    /// As the admin API and `GET /v1/key` say it: the limit's name, its scope, amounts
    /// (dollars as dollars), what is left, and the reset in milliseconds and as OpenAI's
    /// headers write it.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let amount = |n: u64| amount_json(self.limit.resource, n);
        serde_json::json!({
            "name": self.limit.name(),
            "scope": &*self.scope,
            "limit": amount(self.limit.amount),
            "used": amount(self.used),
            "in_flight": amount(self.held),
            "remaining": amount(self.limit.amount.saturating_sub(self.used)),
            "reset_ms": self.reset_ms,
            "reset": self.reset_ms.map(duration_text),
        })
    }
}

/// The 400 of a request that alone takes more than `rule` allows in a whole window.
fn never_fits(rule: &Rule, amount: u64, demand: Demand) -> ApiError {
    let takes = match rule.limit.resource {
        Resource::Usd => format!("${:.4}", amount as f64 / NANOS_PER_USD),
        Resource::Tokens => format!(
            "{amount} tokens ({} samples of {} prompt tokens and {} of answer room)",
            demand.samples, demand.prompt_tokens, demand.room
        ),
        Resource::Samples => format!("{amount} samples"),
        Resource::Requests => format!("{amount} request"),
    };
    ApiError::invalid(format!(
        "this request may take {takes}, more than {} of {} ({}) allows at once: ask for fewer \
         samples or less answer room (max_tokens)",
        rule.limit.name(),
        rule.scope,
        rule.limit.stated()
    ))
    .code("exceeds_limit")
}

/// Why a reservation was refused.
enum Refusal {
    /// By the limit of this index among the request's.
    Limit { index: usize, why: Why },
    /// The store failed, and `on_state_error = "refuse"`.
    Store(store::StoreError),
}

/// Why a limit refused a reservation.
enum Why {
    /// The request alone takes this much, more than the limit.
    NeverFits(u64),
    /// The limit is reached in a window that ends in `reset_ms` and holds `used`;
    /// `in_flight` when only the reservations of requests in flight hold it.
    Full {
        reset_ms: u64,
        used: u64,
        in_flight: bool,
    },
}

/// The limits a request meets ([`Quota::applicable`]).
pub(crate) struct Applicable<'a> {
    rules: Vec<&'a Rule>,
    price: Option<Price>,
}

impl Applicable<'_> {
    /// Whether a limit counts tokens or dollars: then the prompt's tokens are needed.
    pub(crate) fn counts_tokens(&self) -> bool {
        (self.rules.iter()).any(|r| counts_prompt(r.limit.resource))
    }
}

/// One counter a reservation charged.
#[derive(Debug)]
struct Held {
    counter: Arc<str>,
    slot: usize,
    resource: Resource,
    start: u64,
    window_ms: u64,
    reserved: u64,
}

/// What a request reserved: replaced by what it came to with [`settle`](Self::settle); a
/// reservation dropped unsettled is settled as a request none of whose samples started.
pub(crate) struct Reservation {
    store: Arc<dyn Store>,
    held: Vec<Held>,
    price: Option<Price>,
    settled: bool,
    rate: RateHeaders,
}

impl Reservation {
    /// The `x-ratelimit-*` headers this reservation leaves ([`RateHeaders`]).
    pub(crate) fn rate_headers(&self) -> crate::error::Headers {
        self.rate.clone().into_pairs()
    }

    /// The reservation replaced by what the request `counted` (without waiting: Redis's
    /// settlements are applied by its store's task).
    pub(crate) fn settle(mut self, counted: Counted) {
        self.settle_as(counted);
    }

    fn settle_as(&mut self, counted: Counted) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        let adjusts: Vec<Adjust> = (self.held.iter())
            .filter_map(|h| {
                let used = used(h.resource, counted, self.price);
                let held = held_of(h.resource, h.reserved);
                // A request's count of 1 is what it uses: nothing to settle.
                (used != h.reserved || held != 0).then(|| Adjust {
                    counter: h.counter.clone(),
                    slot: h.slot,
                    start: h.start,
                    window_ms: h.window_ms,
                    held,
                    used,
                })
            })
            .collect();
        if !adjusts.is_empty() {
            self.store.settle_later(adjusts);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.settle_as(Counted::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_headers_name_the_limit_with_the_least_left_in_openais_words() {
        let limit = |text: &str| {
            let config = Config::from_toml(&format!(
                "[auth]\n[[auth.keys]]\nname = \"k\"\nsha256 = \"{}\"\n[auth.keys.limits]\n{text}\n\
                 [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
                "0".repeat(64)
            ))
            .unwrap();
            *config.auth.unwrap().keys[0].limits.iter().next().unwrap()
        };
        let (per_minute, per_day) = (
            limit("tokens_per_minute = 100"),
            limit("tokens_per_day = 1000"),
        );
        let requests = limit("requests_per_minute = 3");
        let rate = RateHeaders::of(
            [
                (per_minute, 40, 42_000),
                (per_day, 990, 3_723_000),
                (requests, 1, 20),
            ]
            .into_iter(),
        );
        let pairs: Vec<(String, String)> = (rate.into_pairs().into_iter())
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect();
        let want = [
            ("x-ratelimit-limit-requests", "3".to_string()),
            ("x-ratelimit-remaining-requests", "2".to_string()),
            ("x-ratelimit-reset-requests", "20ms".to_string()),
            ("x-ratelimit-limit-tokens", "1000".to_string()),
            ("x-ratelimit-remaining-tokens", "10".to_string()),
            ("x-ratelimit-reset-tokens", "1h2m3s".to_string()),
        ]
        .map(|(name, value)| (name.to_owned(), value));
        assert_eq!(pairs, want);
        assert_eq!(duration_text(360_000), "6m0s");
        assert_eq!(duration_text(41_001), "42s");
        assert_eq!(duration_text(999), "999ms");
        assert_eq!(duration_text(1_000), "1s");
        assert_eq!(duration_text(3_605_000), "1h0m5s");
    }

    /// The limits of `toml`, and its keys as callers, in the file's order.
    fn quota_and_keys(toml: &str) -> (Quota, Vec<Caller>) {
        let config = Config::from_toml(toml).unwrap();
        let slots = Arc::new(Slots::default());
        let file = crate::keyring::FileKeys::of(&config, &|v: &str| Ok(format!("sk-{v}"))).unwrap();
        let ring = crate::keyring::KeyRing::new(file, slots.clone(), None);
        let keys = ring.snapshot();
        let callers = (config.auth.iter().flat_map(|a| &a.keys))
            .map(|k| Caller::Named(keys.get(&k.name).unwrap().clone()))
            .collect();
        (
            Quota::new(&config, &slots, Arc::new(Metrics::new())).unwrap(),
            callers,
        )
    }

    /// The limits of `toml`, and its first key.
    fn quota(toml: &str) -> (Quota, Caller) {
        let (q, keys) = quota_and_keys(toml);
        (q, keys.into_iter().next().unwrap())
    }

    /// The count of a prompt whose demand is no bound: never asked.
    async fn uncounted() -> u64 {
        unreachable!("the prompt was counted, not bounded")
    }

    const MODEL: &str = "[[models]]\nname = \"m\"\nprice = { input_per_million = 1.0, output_per_million = 2.0 }\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n";

    #[tokio::test]
    async fn a_reservation_past_a_limit_is_refused_naming_it() {
        let (q, key) = quota(&format!(
            "[[auth.keys]]\nname = \"team-a\"\nsha256 = \"{}\"\ntags = [\"t\"]\n[auth.keys.limits]\nrequests_per_minute = 2\n{MODEL}",
            "0".repeat(64)
        ));
        let demand = Demand {
            samples: 1,
            prompt_tokens: 10,
            prompt_bound: false,
            room: 10,
        };
        let mut kept = Vec::new();
        for _ in 0..2 {
            let ap = q.applicable(&key, "m").unwrap();
            assert!(!ap.counts_tokens());
            kept.push(q.reserve(ap, demand, uncounted).await.unwrap().unwrap());
        }
        let ap = q.applicable(&key, "m").unwrap();
        let e = q.reserve(ap, demand, uncounted).await.err().unwrap();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.code.as_deref(), Some("rate_limit_exceeded"));
        assert!(
            e.message.starts_with(
                "requests_per_minute of key `team-a` (2 a minute) reached; resets in "
            ),
            "{}",
            e.message
        );
        assert!((1..=60).contains(&e.retry_after.unwrap()));
        // Another caller, or another model without limits, meets none.
        assert!(q.applicable(&Caller::Unnamed, "m").is_none());
    }

    #[tokio::test]
    async fn tokens_and_dollars_are_reserved_then_replaced_by_what_was_counted() {
        let (q, key) = quota(&format!(
            "[[auth.keys]]\nname = \"team-a\"\nsha256 = \"{}\"\n[auth.keys.limits]\ntokens_per_minute = 1000\nusd_per_day = 0.001\n{MODEL}",
            "0".repeat(64)
        ));
        // 4 samples of 100 prompt tokens and 100 of room: 800 tokens, $0.0012: too much
        // money for one request.
        let big = Demand {
            samples: 4,
            prompt_tokens: 100,
            prompt_bound: false,
            room: 100,
        };
        let ap = q.applicable(&key, "m").unwrap();
        assert!(ap.counts_tokens());
        let e = q.reserve(ap, big, uncounted).await.err().unwrap();
        assert_eq!(e.code.as_deref(), Some("exceeds_limit"), "{}", e.message);
        assert!(
            e.message
                .contains("usd_per_day of key `team-a` ($0.00 a day)"),
            "{}",
            e.message
        );
        // 2 samples: 400 tokens, $0.0006 reserved.
        let small = Demand {
            samples: 2,
            prompt_tokens: 100,
            prompt_bound: false,
            room: 100,
        };
        let ap = q.applicable(&key, "m").unwrap();
        let first = q.reserve(ap, small, uncounted).await.unwrap().unwrap();
        // A second would pass the dollars.
        let ap = q.applicable(&key, "m").unwrap();
        let e = q.reserve(ap, small, uncounted).await.err().unwrap();
        assert!(
            e.message.starts_with("usd_per_day of key `team-a`"),
            "{}",
            e.message
        );
        // The first used 100 prompt and 50 generated tokens: $0.0002.
        first.settle(Counted {
            samples: 2,
            prompt_tokens: 100,
            completion_tokens: 50,
        });
        let ap = q.applicable(&key, "m").unwrap();
        let second = q.reserve(ap, small, uncounted).await.unwrap().unwrap();
        // Dropped unsettled: nothing was counted.
        drop(second);
        let ap = q.applicable(&key, "m").unwrap();
        q.reserve(ap, small, uncounted)
            .await
            .unwrap()
            .unwrap()
            .settle(Counted::default());
    }

    use crate::test_log::Lines;

    #[test]
    fn failures_are_said_once_when_they_begin_and_once_when_they_end() {
        let lines = Lines::default();
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(
            metrics.clone(),
            OnStateError::Allow,
            "redis://127.0.0.1:1".into(),
        );
        let error = store::StoreError("redis: connection refused".into());
        lines.capture(|| {
            health.answered();
            for _ in 0..3 {
                health.failed("reserve", &error);
            }
            health.failed("settle", &error);
            assert!(metrics.encode().contains("choicewise_state_failing 1"));
            health.answered();
            health.answered();
        });
        let text = lines.text();
        assert_eq!(text.matches("stopped").count(), 1, "{text}");
        assert!(
            text.contains(
                "requests are served without their limits counted (on_state_error = \"allow\")"
            ),
            "{text}"
        );
        assert_eq!(text.matches("resumed").count(), 1, "{text}");
        let encoded = metrics.encode();
        assert!(encoded.contains("choicewise_state_failing 0"), "{encoded}");
        assert!(
            encoded.contains("choicewise_state_errors_total{op=\"reserve\"} 3"),
            "{encoded}"
        );
    }

    #[tokio::test]
    async fn a_tags_limit_is_shared_by_its_keys() {
        let toml = format!(
            "[[auth.keys]]\nname = \"a\"\nkey_env = \"A\"\ntags = [\"batch\"]\n\
             [[auth.keys]]\nname = \"b\"\nkey_env = \"B\"\ntags = [\"batch\"]\n\
             [[auth.keys]]\nname = \"c\"\nkey_env = \"C\"\n\
             [[auth.tags]]\nname = \"batch\"\n[auth.tags.limits]\nrequests_per_minute = 2\n{MODEL}"
        );
        let (q, keys) = quota_and_keys(&toml);
        let demand = Demand {
            samples: 1,
            ..Demand::default()
        };
        let ap = |i: usize| q.applicable(&keys[i], "m").unwrap();
        let _a = q.reserve(ap(0), demand, uncounted).await.unwrap();
        let _b = q.reserve(ap(1), demand, uncounted).await.unwrap();
        let e = q.reserve(ap(0), demand, uncounted).await.err().unwrap();
        assert!(
            e.message
                .starts_with("requests_per_minute of tag `batch` (2 a minute) reached"),
            "{}",
            e.message
        );
        // A key without the tag does not share its limit (nor has any).
        assert!(q.applicable(&keys[2], "m").is_none());
    }

    #[tokio::test]
    async fn a_prompt_is_counted_only_when_its_bound_would_be_refused() {
        let (q, key) = quota(&format!(
            "[[auth.keys]]\nname = \"team-a\"\nsha256 = \"{}\"\n[auth.keys.limits]\nsamples_per_minute = 100\ntokens_per_minute = 1000\n{MODEL}",
            "0".repeat(64)
        ));
        let counts = std::sync::atomic::AtomicUsize::new(0);
        let count = |tokens: u64| {
            counts.fetch_add(1, Ordering::Relaxed);
            async move { tokens }
        };
        // A bound of 300 and 100 of room fits the 1000 tokens: nothing counted.
        let bounded = Demand {
            samples: 1,
            prompt_tokens: 300,
            prompt_bound: true,
            room: 100,
        };
        let ap = q.applicable(&key, "m").unwrap();
        let first = q.reserve(ap, bounded, || count(20)).await.unwrap().unwrap();
        assert_eq!(counts.load(Ordering::Relaxed), 0);
        // 400 reserved, 600 left: a bound of 550 and 100 of room would pass the limit; the
        // prompt counted (20 tokens) fits, and only that is reserved.
        let close = Demand {
            prompt_tokens: 550,
            ..bounded
        };
        let ap = q.applicable(&key, "m").unwrap();
        let second = q.reserve(ap, close, || count(20)).await.unwrap().unwrap();
        assert_eq!(counts.load(Ordering::Relaxed), 1);
        assert_eq!(second.held[1].reserved, 120);
        // 520 reserved: a prompt whose count passes the limit too is refused, by its count.
        let ap = q.applicable(&key, "m").unwrap();
        let e = q.reserve(ap, close, || count(500)).await.err().unwrap();
        assert_eq!(counts.load(Ordering::Relaxed), 2);
        assert_eq!(
            e.code.as_deref(),
            Some("rate_limit_exceeded"),
            "{}",
            e.message
        );
        // A bound past the whole limit is not refused as more than the limit allows before
        // the prompt is counted; a count past it is, naming the count.
        let huge = Demand {
            prompt_tokens: 5_000,
            ..bounded
        };
        drop((first, second));
        let ap = q.applicable(&key, "m").unwrap();
        let third = q.reserve(ap, huge, || count(30)).await.unwrap().unwrap();
        assert_eq!(third.held[1].reserved, 130);
        let ap = q.applicable(&key, "m").unwrap();
        let e = q.reserve(ap, huge, || count(2_000)).await.err().unwrap();
        assert_eq!(e.code.as_deref(), Some("exceeds_limit"), "{}", e.message);
        assert!(
            e.message
                .contains("2100 tokens (1 samples of 2000 prompt tokens"),
            "{}",
            e.message
        );
        // A limit that counts no tokens refuses without a count.
        let before = counts.load(Ordering::Relaxed);
        let many = Demand {
            samples: 101,
            ..bounded
        };
        let ap = q.applicable(&key, "m").unwrap();
        let e = q.reserve(ap, many, || count(1)).await.err().unwrap();
        assert!(e.message.contains("samples_per_minute"), "{}", e.message);
        assert_eq!(counts.load(Ordering::Relaxed), before);
    }

    #[test]
    fn waits_are_said_in_their_units() {
        assert_eq!(said(12), "12 s");
        assert_eq!(said(119), "119 s");
        assert_eq!(said(150), "3 min");
        assert_eq!(said(86_400), "24 h 0 min");
    }
}
