//! When upstreams fail: the tries of a sample over a model's upstreams and its fallbacks,
//! each upstream's passive health (ejection, a probe), and each model's retry budget.
//!
//! A **try** is one upstream request up to its first byte (its status and headers, within
//! `first_byte_timeout_s`). It fails on a refused connection, on no answer in time, or on a
//! status of 408, 429, 500, 502, 503, 504 or 529; any other status is the client's own error
//! and ends the tries at once. The next try goes to the model's next upstream that can serve
//! the request (skipping ejected ones, and one whose `Retry-After` is not over), else waits
//! its backoff (full jitter) on the same one. Once a try has streamed, nothing here restarts
//! it: what the client received is never duplicated or spliced.
//!
//! [`Health`] ejects an upstream after `eject_after` failed tries in a row, for `eject_for_s`
//! doubled at each ejection in a row (300 s at most); when that time is over one try is let
//! through as a probe, and its success restores the upstream. As in Envoy's outlier
//! detection, one client cannot eject an upstream that serves others: failures in a row from
//! one client alone eject it only when no other client was served by it lately (or when it
//! refuses connections, which no request's content causes), and a probe that fails for a
//! client whose failures ejected it ejects it again for no longer. [`Budget`] bounds retries to
//! a share of first tries over the last ten seconds, one budget per model, so that a model
//! whose upstreams are all down answers at once instead of multiplying its load, and spends
//! no other model's retries.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use choicewise_client::{ClientError, ClientErrorKind};

use crate::config::{HealthConfig, RetryConfig};

/// A model's retry rules (`[models.retry]`), as durations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// Tries per sample over the model's upstreams, the first included.
    pub attempts: u32,
    pub backoff: Duration,
    pub max_backoff: Duration,
    pub first_byte_timeout: Duration,
}

impl RetryPolicy {
    pub fn of(config: &RetryConfig) -> RetryPolicy {
        RetryPolicy {
            attempts: config.attempts.max(1),
            backoff: Duration::from_millis(config.backoff_ms),
            max_backoff: Duration::from_millis(config.max_backoff_ms),
            first_byte_timeout: Duration::from_secs_f64(config.first_byte_timeout_s),
        }
    }

    /// The wait before try `retry` (1 for the first retry) on the same upstream: a random
    /// share of `backoff · 2^(retry-1)`, at most `max_backoff` (full jitter).
    pub fn backoff(&self, retry: u32) -> Duration {
        let ceiling = self
            .backoff
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16))
            .min(self.max_backoff);
        ceiling.mul_f64(jitter())
    }
}

/// A number in [0, 1), from the clock: enough to spread retries, no generator to seed.
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // xorshift of the nanoseconds, so that close calls differ.
    let mut x = u64::from(nanos) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (x % 1_000_000) as f64 / 1_000_000.0
}

/// How one try ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    /// No connection.
    Connect,
    /// No first byte within `first_byte_timeout_s`.
    Timeout,
    /// 429.
    TooMany,
    /// 408, 5xx or 529.
    Server,
    /// The stream was cut after its first byte.
    Cut,
    /// The upstream refused the request (a 4xx other than 408 and 429): the client's own
    /// error, passed through, never retried.
    Refused,
}

impl Outcome {
    /// Its name in `tries` and in the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Connect => "connect",
            Outcome::Timeout => "timeout",
            Outcome::TooMany => "429",
            Outcome::Server => "5xx",
            Outcome::Cut => "cut",
            Outcome::Refused => "4xx",
        }
    }
}

/// What a failed try means: retried (with the outcome), or the client's own error.
pub(crate) fn classify(e: &ClientError) -> Option<Outcome> {
    match (e.kind(), e.status()) {
        (ClientErrorKind::Connect, _) => Some(Outcome::Connect),
        (ClientErrorKind::Timeout, _) => Some(Outcome::Timeout),
        (_, Some(429)) => Some(Outcome::TooMany),
        (_, Some(status)) if choicewise_client::retryable_status(status) => Some(Outcome::Server),
        // A request that failed once sent (a reset before the headers) is a connection's
        // failure too.
        (ClientErrorKind::Request, None) => Some(Outcome::Connect),
        _ => None,
    }
}

/// Whether an upstream may be tried now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Availability {
    Healthy,
    /// Ejected, its time over: one try as a probe.
    Probe,
    /// Ejected, or asked to wait (`Retry-After`): not before this instant.
    Until(Instant),
}

/// One upstream's passive health (`[models.health]`).
#[derive(Debug)]
pub(crate) struct Health {
    eject_after: u32,
    eject_for: Duration,
    state: Mutex<HealthState>,
}

#[derive(Debug, Default)]
struct HealthState {
    failures_in_row: u32,
    /// The clients of the failures in a row (two at most: enough to say "several").
    failing_clients: Vec<ClientId>,
    /// The clients whose failures ejected it.
    ejected_by: Vec<ClientId>,
    ejected_until: Option<Instant>,
    ejections_in_row: u32,
    probing: bool,
    wait_until: Option<Instant>,
    /// The last two distinct clients it served, and when.
    served: Vec<(ClientId, Instant)>,
}

/// Who a request comes from, for the ejection rules: its API key's hash, or without keys its
/// connection's peer address's (never the key itself).
pub(crate) type ClientId = u64;

/// The longest an upstream stays ejected.
const MAX_EJECTION: Duration = Duration::from_secs(300);

/// How long an upstream counts as serving a client after that client's last success: while
/// it serves another, one client's failures alone do not eject it.
pub(crate) const SERVED_WITHIN: Duration = Duration::from_secs(60);

impl Health {
    pub fn new(config: &HealthConfig) -> Health {
        Health {
            eject_after: config.eject_after.max(1),
            eject_for: Duration::from_secs_f64(config.eject_for_s),
            state: Mutex::new(HealthState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether it may be tried now; a probe is handed out once.
    pub fn take(&self, now: Instant) -> Availability {
        let mut s = self.state();
        if let Some(until) = s.ejected_until {
            if now < until || s.probing {
                return Availability::Until(until.max(now + Duration::from_millis(1)));
            }
            s.probing = true;
            return Availability::Probe;
        }
        match s.wait_until {
            Some(until) if now < until => Availability::Until(until),
            _ => Availability::Healthy,
        }
    }

    /// Whether it may be tried now, handing out nothing (a probe due shows as `Probe`).
    pub fn peek(&self, now: Instant) -> Availability {
        let s = self.state();
        if let Some(until) = s.ejected_until {
            if now < until || s.probing {
                return Availability::Until(until.max(now + Duration::from_millis(1)));
            }
            return Availability::Probe;
        }
        match s.wait_until {
            Some(until) if now < until => Availability::Until(until),
            _ => Availability::Healthy,
        }
    }

    /// The probe handed out (if any) is over without a result: the next may go. A no-op
    /// when the try's end was already said ([`succeeded`](Self::succeeded),
    /// [`failed`](Self::failed)).
    pub fn probe_over(&self) {
        self.state().probing = false;
    }

    /// Whether it is ejected now (its time may be over, its probe not yet back).
    pub fn ejected(&self) -> bool {
        self.state().ejected_until.is_some()
    }

    /// Whether its last try succeeded: it served someone, and has failed no try since (nor
    /// is it ejected). What a retry that leaves an ejected upstream must find to be free of
    /// the retry budget.
    pub fn answering(&self) -> bool {
        let s = self.state();
        s.ejected_until.is_none() && s.failures_in_row == 0 && !s.served.is_empty()
    }

    /// A try of `client` succeeded (or the upstream answered it with the client's own
    /// error): the upstream is healthy (restored, if it was ejected), and serves `client`.
    pub fn succeeded(&self, client: ClientId, now: Instant) -> bool {
        let mut s = self.state();
        let restored = s.ejected_until.is_some();
        let mut served = std::mem::take(&mut s.served);
        *s = HealthState::default();
        served.retain(|(c, _)| *c != client);
        served.insert(0, (client, now));
        served.truncate(2);
        s.served = served;
        restored
    }

    /// A try of `client` failed as `outcome`; `wait` is a `Retry-After` it asked for,
    /// `probe` whether the try was the probe [`take`](Self::take) handed out. Returns whether
    /// this failure ejected it.
    ///
    /// Only the probe's failure ejects an ejected upstream again: the failures of tries
    /// already under way when it was ejected say nothing new, and counting them would double
    /// its time once for each, so that a burst of failures held it out for five minutes
    /// instead of `eject_for_s`. The probe's failure doubles the time only when it confirms
    /// the ejection independently: a refused connection, or a client other than those whose
    /// failures ejected it (else a client whose requests make it fail could hold it out ever
    /// longer by failing its probes).
    ///
    /// `eject_after` failures in a row eject it when they come from two clients or more, or
    /// from one client while no other was served by it within [`SERVED_WITHIN`], or when the
    /// last is a refused connection: one client's failures alone (a prompt that makes it
    /// answer 500, or outlasts `first_byte_timeout_s`) never eject an upstream that serves
    /// others.
    pub fn failed(
        &self,
        now: Instant,
        wait: Option<Duration>,
        probe: bool,
        client: ClientId,
        outcome: Outcome,
    ) -> bool {
        let mut s = self.state();
        if let Some(wait) = wait {
            // A `Retry-After` far in the future (an HTTP date) holds it no longer than an
            // ejection would.
            s.wait_until = Some(now + wait.min(MAX_EJECTION));
        }
        if probe {
            s.probing = false;
            if outcome == Outcome::Connect || !s.ejected_by.contains(&client) {
                // Confirmed by another client, or by a refused connection: for longer.
                s.ejections_in_row += 1;
                if !s.ejected_by.contains(&client) {
                    s.ejected_by.push(client);
                }
            }
            s.ejected_until = Some(now + self.ejection(s.ejections_in_row.max(1)));
            return true;
        }
        if s.ejected_until.is_some() {
            return false;
        }
        s.failures_in_row += 1;
        if !s.failing_clients.contains(&client) && s.failing_clients.len() < 2 {
            s.failing_clients.push(client);
        }
        if s.failures_in_row < self.eject_after {
            return false;
        }
        let serves_others = (s.served.iter())
            .any(|(c, at)| *c != client && now.saturating_duration_since(*at) < SERVED_WITHIN);
        let one_client = s.failing_clients.len() < 2;
        if one_client && serves_others && outcome != Outcome::Connect {
            // One client's failures alone: the streak waits for another client's.
            return false;
        }
        s.failures_in_row = 0;
        s.ejected_by = std::mem::take(&mut s.failing_clients);
        s.ejections_in_row += 1;
        s.ejected_until = Some(now + self.ejection(s.ejections_in_row));
        true
    }

    fn ejection(&self, in_row: u32) -> Duration {
        self.eject_for
            .saturating_mul(1u32 << in_row.saturating_sub(1).min(16))
            .min(MAX_EJECTION)
    }
}

/// A model's retry budget (`[limits] retry_budget_percent`, one per model): its retries over
/// the last ten seconds may be at most that share of its first tries, and at least ten.
/// Counted in one bucket per second, so that a call costs the same however busy the gateway
/// is.
#[derive(Debug)]
pub(crate) struct Budget {
    percent: f64,
    /// (second since `origin`, first tries, retries), oldest first, the last ten seconds.
    window: Mutex<VecDeque<(u64, u64, u64)>>,
    origin: Instant,
}

/// The window the budget counts over, in seconds.
const BUDGET_WINDOW_S: u64 = 10;
/// Retries always allowed within the window.
const BUDGET_FLOOR: u64 = 10;

impl Budget {
    pub fn new(percent: f64) -> Budget {
        Budget {
            percent,
            window: Mutex::new(VecDeque::new()),
            origin: Instant::now(),
        }
    }

    /// The window up to `now`, its current second's bucket last.
    fn window(&self, now: Instant) -> std::sync::MutexGuard<'_, VecDeque<(u64, u64, u64)>> {
        let second = now.saturating_duration_since(self.origin).as_secs();
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        while w
            .front()
            .is_some_and(|(s, _, _)| second.saturating_sub(*s) >= BUDGET_WINDOW_S)
        {
            w.pop_front();
        }
        if w.back().is_none_or(|(s, _, _)| *s != second) {
            w.push_back((second, 0, 0));
        }
        w
    }

    /// A first try.
    pub fn first(&self, now: Instant) {
        if let Some(bucket) = self.window(now).back_mut() {
            bucket.1 += 1;
        }
    }

    /// Asks for a retry: counted and `true` while within the budget.
    pub fn retry(&self, now: Instant) -> bool {
        let mut w = self.window(now);
        let firsts: u64 = w.iter().map(|b| b.1).sum();
        let retries: u64 = w.iter().map(|b| b.2).sum();
        let allowed = ((firsts as f64) * self.percent / 100.0) as u64;
        if retries >= allowed.max(BUDGET_FLOOR) {
            return false;
        }
        if let Some(bucket) = w.back_mut() {
            bucket.2 += 1;
        }
        true
    }
}

/// How often one kind of warning of one model is written at most.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(1);

/// Warnings rate-limited by kind (one model's: a value per model): at most one of a kind per
/// [`WARN_EVERY`], the next one written saying how many were left out, so that a client
/// whose requests all fail the same way cannot fill the logs.
#[derive(Debug, Default)]
pub(crate) struct Warnings {
    /// Per kind: when one was last written, and how many were left out since.
    kinds: Mutex<Vec<(&'static str, Instant, u64)>>,
}

impl Warnings {
    /// Whether a warning of `kind` may be written at `now`: `Some(left_out)`, the number
    /// left out since the last one written, or `None` (this one left out, and counted).
    pub fn allow(&self, kind: &'static str, now: Instant) -> Option<u64> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        match kinds.iter_mut().find(|(k, _, _)| *k == kind) {
            None => {
                kinds.push((kind, now, 0));
                Some(0)
            }
            Some((_, last, left_out)) if now.saturating_duration_since(*last) >= WARN_EVERY => {
                *last = now;
                Some(std::mem::take(left_out))
            }
            Some((_, _, left_out)) => {
                *left_out = left_out.saturating_add(1);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two clients.
    const A: ClientId = 1;
    const B: ClientId = 2;

    fn health(eject_after: u32, eject_for_s: f64) -> Health {
        Health::new(&HealthConfig {
            eject_after,
            eject_for_s,
        })
    }

    #[test]
    fn warnings_are_one_per_kind_per_second_with_the_count_left_out() {
        let w = Warnings::default();
        let t = Instant::now();
        assert_eq!(w.allow("a", t), Some(0));
        for k in 1..=500u64 {
            assert_eq!(w.allow("a", t + Duration::from_micros(k)), None);
        }
        // Another kind is not held by the first.
        assert_eq!(w.allow("b", t), Some(0));
        assert_eq!(w.allow("a", t + WARN_EVERY), Some(500));
        assert_eq!(w.allow("a", t + WARN_EVERY), None);
        assert_eq!(w.allow("a", t + 3 * WARN_EVERY), Some(1));
    }

    #[test]
    fn ejection_after_failures_in_a_row_then_one_probe() {
        let h = health(3, 10.0);
        let t = Instant::now();
        assert!(!h.failed(t, None, false, A, Outcome::Server));
        assert!(!h.failed(t, None, false, A, Outcome::Server));
        assert_eq!(h.take(t), Availability::Healthy);
        assert!(h.failed(t, None, false, A, Outcome::Server));
        assert!(matches!(h.take(t), Availability::Until(u) if u == t + Duration::from_secs(10)));
        // Time over: one probe, and only one.
        let later = t + Duration::from_secs(11);
        assert_eq!(h.take(later), Availability::Probe);
        assert!(matches!(h.take(later), Availability::Until(_)));
        // Another client's probe fails: ejected for twice as long.
        assert!(h.failed(later, None, true, B, Outcome::Server));
        assert!(
            matches!(h.take(later), Availability::Until(u) if u == later + Duration::from_secs(20))
        );
        // A success restores it.
        let much_later = later + Duration::from_secs(21);
        assert_eq!(h.take(much_later), Availability::Probe);
        assert!(h.succeeded(A, much_later));
        assert_eq!(h.take(much_later), Availability::Healthy);
        assert!(!h.ejected());
    }

    #[test]
    fn a_success_between_failures_resets_the_count() {
        let h = health(2, 10.0);
        let t = Instant::now();
        assert!(!h.failed(t, None, false, A, Outcome::Server));
        h.succeeded(A, t);
        assert!(!h.failed(t, None, false, A, Outcome::Server));
        assert_eq!(h.take(t), Availability::Healthy);
    }

    #[test]
    fn ejections_double_up_to_five_minutes() {
        let h = health(1, 100.0);
        let mut t = Instant::now();
        let mut lengths = Vec::new();
        for probe in [false, true, true, true] {
            h.failed(t, None, probe, A, Outcome::Connect);
            let Availability::Until(u) = h.take(t) else {
                panic!()
            };
            lengths.push((u - t).as_secs());
            t = u;
            assert_eq!(h.take(t), Availability::Probe);
        }
        assert_eq!(lengths, [100, 200, 300, 300]);
    }

    #[test]
    fn failures_under_way_at_the_ejection_do_not_lengthen_it() {
        let h = health(2, 30.0);
        let t = Instant::now();
        assert!(!h.failed(t, None, false, A, Outcome::Server));
        assert!(h.failed(t, None, false, A, Outcome::Server));
        // Tries sent before the ejection fail after it: it stays ejected for 30 s, not 60,
        // 120, ... once for each.
        for _ in 0..20 {
            assert!(!h.failed(t, None, false, A, Outcome::Server));
        }
        assert_eq!(h.take(t), Availability::Until(t + Duration::from_secs(30)));
        let later = t + Duration::from_secs(30);
        assert_eq!(h.take(later), Availability::Probe);
        // The probe's failure does: 60 s.
        assert!(h.failed(later, None, true, B, Outcome::Server));
        assert_eq!(
            h.take(later),
            Availability::Until(later + Duration::from_secs(60))
        );
    }

    #[test]
    fn one_clients_failures_alone_do_not_eject_an_upstream_serving_others() {
        let h = health(2, 30.0);
        let t = Instant::now();
        h.succeeded(B, t);
        // A's prompt makes it answer 500, many times in a row: B is served, it stays.
        for _ in 0..10 {
            assert!(!h.failed(t, None, false, A, Outcome::Server));
        }
        assert_eq!(h.take(t), Availability::Healthy);
        // B fails too: two clients, it is ejected.
        assert!(h.failed(t, None, false, B, Outcome::Server));
        assert!(h.ejected());
        // Refused connections are no client's doing: ejected by one client's tries too.
        let h = health(2, 30.0);
        h.succeeded(B, t);
        assert!(!h.failed(t, None, false, A, Outcome::Connect));
        assert!(h.failed(t, None, false, A, Outcome::Connect));
        // No other client served lately: one client's failures eject it (a dead upstream of
        // a gateway with one client).
        let h = health(2, 30.0);
        h.succeeded(B, t);
        let later = t + SERVED_WITHIN + Duration::from_secs(1);
        assert!(!h.failed(later, None, false, A, Outcome::Timeout));
        assert!(h.failed(later, None, false, A, Outcome::Timeout));
    }

    #[test]
    fn a_probe_failed_by_the_ejecting_client_does_not_lengthen_the_ejection() {
        let h = health(2, 30.0);
        let t = Instant::now();
        assert!(!h.failed(t, None, false, A, Outcome::Server));
        assert!(h.failed(t, None, false, A, Outcome::Server));
        let later = t + Duration::from_secs(30);
        assert_eq!(h.take(later), Availability::Probe);
        // A's own request is the probe and fails: 30 s again, not 60.
        assert!(h.failed(later, None, true, A, Outcome::Server));
        assert_eq!(
            h.take(later),
            Availability::Until(later + Duration::from_secs(30))
        );
        // B's probe fails: confirmed, 60 s.
        let again = later + Duration::from_secs(30);
        assert_eq!(h.take(again), Availability::Probe);
        assert!(h.failed(again, None, true, B, Outcome::Server));
        assert_eq!(
            h.take(again),
            Availability::Until(again + Duration::from_secs(60))
        );
    }

    #[test]
    fn retry_after_holds_the_upstream() {
        let h = health(5, 10.0);
        let t = Instant::now();
        h.failed(t, Some(Duration::from_secs(1)), false, A, Outcome::TooMany);
        assert_eq!(h.take(t), Availability::Until(t + Duration::from_secs(1)));
        assert_eq!(h.take(t + Duration::from_secs(2)), Availability::Healthy);
    }

    #[test]
    fn the_budget_allows_a_share_of_first_tries_and_a_floor() {
        let b = Budget::new(20.0);
        let t = Instant::now();
        // No traffic: the floor of ten.
        assert_eq!((0..15).filter(|_| b.retry(t)).count(), 10);
        let b = Budget::new(20.0);
        for _ in 0..100 {
            b.first(t);
        }
        assert_eq!((0..50).filter(|_| b.retry(t)).count(), 20);
        // Ten seconds later the window is empty again.
        let later = t + Duration::from_secs(11);
        assert!(b.retry(later));
        let b = Budget::new(20.0);
        let later = t + Duration::from_secs(11);
        assert_eq!((0..50).filter(|_| b.retry(later)).count(), 10);
    }

    #[test]
    fn backoff_is_jittered_under_its_ceiling() {
        let p = RetryPolicy {
            attempts: 3,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(250),
            first_byte_timeout: Duration::from_secs(1),
        };
        for retry in 1..6 {
            let ceiling = Duration::from_millis((100u64 << (retry - 1)).min(250));
            assert!(p.backoff(retry) <= ceiling);
        }
    }
}
