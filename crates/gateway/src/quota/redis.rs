//! The counts in Redis (`[state] redis_url`; Valkey speaks the same protocol): shared by
//! every replica, kept across restarts. One Lua script, `redis/counts.lua`, settles and
//! reserves, atomically: a counter is a hash of its window's start (`s`, milliseconds of
//! the Redis server's clock, so that the replicas' clocks do not matter) and its amount
//! (`v`), expiring a second after its window ends.
//!
//! The connection is `redis`'s connection manager (it reconnects by itself), made on first
//! use, inside the runtime. Reservations are grouped into calls as a database groups
//! commits ([`batch`]): one call at a time, each carrying every reservation that came while
//! the one before was made. Settlements are made without waiting: queued (at most
//! [`QUEUED`] requests' worth; past that one is dropped and counted as a failure), they ride
//! with the next reservations' call, or, none coming within [`LINGER`], a task of the
//! store's applies them, in batches of one script call each, under the same deadline.
//! Settlements lost with a call (its error, or its deadline) are counted as the store's
//! failures, never silently.

mod batch;

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{OnceCell, mpsc};

use super::Health;
use super::store::{Adjust, Charge, Peek, Seen, Store, StoreError, StoreFuture, Verdict, Window};
use crate::config::ConfigError;

/// The script: the settlements given, then the reservations, at one moment of Redis's
/// clock; the rule is [`super::store::Memory`]'s (the script's opening comment says its
/// arguments and answers).
const COUNTS: &str = include_str!("redis/counts.lua");

/// The most requests' settlements waiting for a call.
const QUEUED: usize = 4096;

/// The most requests' settlements applied by one script call.
const BATCH: usize = 256;

/// How long a settlement waits for a reservation to ride with before the settlements' task
/// applies it: under load most settlements ride, one script call fewer each.
const LINGER: Duration = Duration::from_millis(5);

/// Settlements made but not applied yet, each a request's, oldest first: at most
/// [`QUEUED`].
#[derive(Default)]
struct Pending(Mutex<VecDeque<Vec<Adjust>>>);

impl Pending {
    /// Queues a request's settlement: false when [`QUEUED`] wait already.
    fn push(&self, adjusts: Vec<Adjust>) -> bool {
        let mut queue = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if queue.len() >= QUEUED {
            return false;
        }
        queue.push_back(adjusts);
        true
    }

    /// Takes the oldest [`BATCH`] requests' settlements at most.
    fn take(&self) -> Vec<Adjust> {
        let mut queue = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = queue.len().min(BATCH);
        queue.drain(..n).flatten().collect()
    }
}

/// The counts in Redis.
pub(crate) struct Redis(Arc<Shared>);

/// What the store and the calls it groups share: a call may outlive the request that made
/// it ([`batch`]).
struct Shared {
    client: redis::Client,
    timeout: Duration,
    connection: OnceCell<ConnectionManager>,
    script: Arc<redis::Script>,
    /// The settlements not applied yet.
    pending: Arc<Pending>,
    /// The reservations waiting for a call.
    calls: batch::Calls,
    /// Wakes the task that applies the settlements no reservation carried, once started.
    later: OnceLock<mpsc::Sender<()>>,
    health: OnceLock<Arc<Health>>,
}

impl Redis {
    /// A store on `url` whose calls take at most `timeout`; nothing is connected yet.
    pub(crate) fn new(url: &str, timeout: Duration) -> Result<Redis, ConfigError> {
        let client = crate::config::redis_client(url)
            .map_err(|e| ConfigError(format!("[state] redis_url: {e}")))?;
        Ok(Redis(Arc::new(Shared {
            client,
            timeout,
            connection: OnceCell::new(),
            script: Arc::new(redis::Script::new(COUNTS)),
            pending: Arc::default(),
            calls: batch::Calls::default(),
            later: OnceLock::new(),
            health: OnceLock::new(),
        })))
    }

    /// Its failures and recoveries are told to `health`.
    pub(crate) fn watch(&self, health: Arc<Health>) {
        let _ = self.0.health.set(health);
    }

    /// The connection manager, made on first use (inside the runtime); each connection
    /// attempt and each answer bounded by the store's deadline.
    pub(crate) async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        self.0.connection().await
    }

    /// `PING`.
    pub(crate) async fn ping(&self) -> Result<(), String> {
        let mut connection = self.0.connection().await.map_err(|e| e.0)?;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map(drop)
            .map_err(|e| store_error(e).0)
    }

    /// Whether the server is a Redis Cluster node (`INFO cluster`'s `cluster_enabled:1`).
    pub(crate) async fn is_cluster(&self) -> Result<bool, String> {
        let mut connection = self.0.connection().await.map_err(|e| e.0)?;
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut connection)
            .await
            .map_err(|e| store_error(e).0)?;
        Ok(info.lines().any(|l| l.trim() == "cluster_enabled:1"))
    }
}

impl Shared {
    /// The connection manager, made on first use (inside the runtime). It connects when
    /// first asked, and again by itself after a failure; each connection attempt and each
    /// answer is bounded by the store's deadline.
    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let manager = self
            .connection
            .get_or_try_init(|| async { manager(&self.client, self.timeout) })
            .await?;
        Ok(manager.clone())
    }

    /// The task that applies the settlements queued by [`Store::settle_later`] that no
    /// reservation carried, started once, inside the runtime; it ends with the store.
    fn later(&self) -> Option<&mpsc::Sender<()>> {
        if let Some(sender) = self.later.get() {
            return Some(sender);
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (sender, receiver) = mpsc::channel(1);
        if self.later.set(sender).is_ok() {
            // A connection of its own: a batch of settlements never waits behind the
            // reservations of the requests being admitted.
            let worker = Settler {
                client: self.client.clone(),
                connection: None,
                timeout: self.timeout,
                script: self.script.clone(),
                health: self.health.get().cloned(),
                pending: self.pending.clone(),
            };
            runtime.spawn(worker.run(receiver));
        }
        self.later.get()
    }

    /// One call: the settlements waiting, then `reservations`, each answered in order (a
    /// refused one charges nothing); all answered with the call's error if it fails, or
    /// finds no answer within the store's deadline.
    async fn call(&self, reservations: &[&[Charge]]) -> Vec<Result<Verdict, StoreError>> {
        let called = tokio::time::timeout(self.timeout, async {
            let mut connection = self.connection().await?;
            let carried = Carried {
                adjusts: self.pending.take(),
                health: self.health.get().map(|h| &**h),
            };
            let answer = counts_on(
                &self.script,
                &mut connection,
                &carried.adjusts,
                reservations,
            );
            let answer = answer.await;
            carried.answered(answer.as_ref().err());
            answer
        });
        let error = match called.await {
            Ok(Ok(verdicts)) => return verdicts,
            Ok(Err(e)) => e,
            Err(_) => StoreError(format!(
                "no answer within state_timeout_ms ({} ms)",
                self.timeout.as_millis()
            )),
        };
        vec![Err(error); reservations.len()]
    }
}

/// A connection manager of `client` (inside the runtime): it connects when first asked, and
/// again by itself after a failure, one retry at most per call; each connection attempt and
/// each answer bounded by `timeout`.
fn manager(client: &redis::Client, timeout: Duration) -> Result<ConnectionManager, StoreError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(200));
    ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(store_error)
}

/// A `redis` error as the store says it (its kind and detail; never the URL).
fn store_error(e: redis::RedisError) -> StoreError {
    StoreError(format!("redis: {e}"))
}

/// Runs [`COUNTS`] on `connection`: `adjusts` applied, then each of `reservations` checked
/// and charged, or refused; a verdict each, in order.
async fn counts_on(
    script: &redis::Script,
    connection: &mut ConnectionManager,
    adjusts: &[Adjust],
    reservations: &[&[Charge]],
) -> Result<Vec<Result<Verdict, StoreError>>, StoreError> {
    let arguments = Arguments::of(adjusts, reservations);
    let mut invocation = script.prepare_invoke();
    for name in &arguments.keys {
        invocation.key(*name);
    }
    invocation.arg(packed(&arguments.numbers));
    invocation.arg(packed(&arguments.reservations));
    let answer: Vec<u8> = invocation
        .invoke_async(connection)
        .await
        .map_err(store_error)?;
    arguments.verdicts(&unpacked(&answer)?, reservations)
}

/// A call's arguments ([`COUNTS`]'s opening comment says them): each counter named once in
/// `keys`; the settlements and the sums of the charges (`numbers`), and the reservations one
/// by one, each settlement, sum and charge naming its counter by its place.
#[derive(Debug, PartialEq, Eq)]
struct Arguments<'a> {
    keys: Vec<&'a str>,
    numbers: Vec<u64>,
    reservations: Vec<u64>,
    /// Each charge's sum, the reservations' charges in turn.
    sums: Vec<usize>,
}

impl<'a> Arguments<'a> {
    /// The arguments of `adjusts`, then `reservations`. The settlements of one counter's
    /// window go as one, their amounts added: the script applies that as it would apply
    /// them in turn, since what a window's count gives back is never more than it holds.
    /// The charges of one counter are added into its sum; the sums stand for the
    /// reservations only where each counter's charges name one window and one limit.
    fn of(adjusts: &'a [Adjust], reservations: &[&'a [Charge]]) -> Arguments<'a> {
        let mut names = Places::default();
        let mut keys = Vec::new();
        let mut place = |slot: usize, name: &'a str| {
            let (i, new) = names.place((slot, name));
            if new {
                keys.push(name);
            }
            1 + i as u64
        };
        let mut windows = Places::default();
        let mut settled: Vec<[u64; 5]> = Vec::new();
        for a in adjusts {
            let at = place(a.slot, &a.counter);
            match windows.place((at, a.start, a.window_ms)) {
                (i, false) => {
                    let s = &mut settled[i];
                    s[3] = s[3].saturating_add(a.held);
                    s[4] = s[4].saturating_add(a.used);
                }
                (_, true) => settled.push([at, a.start, a.window_ms, a.held, a.used]),
            }
        }
        let charged = reservations.iter().map(|r| r.len()).sum::<usize>();
        let mut counters = Places::default();
        let mut summed: Vec<[u64; 5]> = Vec::new();
        let mut sums = Vec::with_capacity(charged);
        let mut stand = true;
        let mut one_by_one = Vec::with_capacity(1 + reservations.len() + 5 * charged);
        one_by_one.push(reservations.len() as u64);
        for charges in reservations {
            one_by_one.push(charges.len() as u64);
            for c in *charges {
                let at = place(c.slot, &c.counter);
                one_by_one.extend([at, c.window_ms, c.limit, c.amount, c.hold]);
                let (i, new) = counters.place(at);
                if new {
                    summed.push([at, c.window_ms, c.limit, c.amount, c.hold]);
                } else {
                    let sum = &mut summed[i];
                    stand &= sum[1] == c.window_ms && sum[2] == c.limit;
                    sum[3] = sum[3].saturating_add(c.amount);
                    sum[4] = sum[4].saturating_add(c.hold);
                }
                sums.push(i);
            }
        }
        let mut numbers = Vec::with_capacity(3 + 5 * (settled.len() + summed.len()));
        numbers.extend([settled.len() as u64, summed.len() as u64, u64::from(stand)]);
        numbers.extend(settled.iter().chain(&summed).flatten());
        Arguments {
            keys,
            numbers,
            reservations: one_by_one,
            sums,
        }
    }

    /// The verdicts of `reservations` (these arguments') in the script's `answer`: all
    /// reserved, each counter's window as the sums found it, or each one's verdict.
    fn verdicts(
        &self,
        answer: &[i64],
        reservations: &[&[Charge]],
    ) -> Result<Vec<Result<Verdict, StoreError>>, StoreError> {
        match answer.split_first() {
            Some((1, found)) => {
                #[cfg(test)]
                tests::ANSWERED[0]
                    .fetch_add(reservations.len(), std::sync::atomic::Ordering::Relaxed);
                self.all_reserved(found, reservations)
            }
            Some((0, each)) => {
                #[cfg(test)]
                tests::ANSWERED[1]
                    .fetch_add(reservations.len(), std::sync::atomic::Ordering::Relaxed);
                verdicts(each, reservations)
            }
            _ => Err(StoreError(format!(
                "redis: the counts' script answered {:?}, neither of its answers",
                &answer[..answer.len().min(8)]
            ))),
        }
    }

    /// Every reservation charged: `found` is the script's clock, then each sum's counter's
    /// window (its start, its amount before the call's charges); a reservation's window of
    /// a counter holds what the reservations before it and its own charge added.
    fn all_reserved(
        &self,
        found: &[i64],
        reservations: &[&[Charge]],
    ) -> Result<Vec<Result<Verdict, StoreError>>, StoreError> {
        let counters = self.numbers[1] as usize;
        let Some((&now, windows)) = found.split_first() else {
            return Err(StoreError(
                "redis: the counts' script answered no clock".into(),
            ));
        };
        if windows.len() != 2 * counters {
            return Err(StoreError(format!(
                "redis: the counts' script answered {} numbers for {counters} counters' windows",
                windows.len()
            )));
        }
        let mut amounts: Vec<u64> = windows
            .chunks_exact(2)
            .map(|w| w[1].max(0) as u64)
            .collect();
        let mut sums = self.sums.iter();
        Ok((reservations.iter())
            .map(|charges| {
                let windows = (charges.iter().zip(&mut sums))
                    .map(|(c, &i)| {
                        amounts[i] = amounts[i].saturating_add(c.amount);
                        Window {
                            start: windows[2 * i].max(0) as u64,
                            amount: amounts[i],
                        }
                    })
                    .collect();
                Ok(Verdict::Reserved {
                    now: now.max(0) as u64,
                    windows,
                })
            })
            .collect())
    }
}

/// Each distinct item's place, in the order first seen: found by a scan while they are few
/// (a call names a few counters), by a map once they are many.
struct Places<K> {
    items: Vec<K>,
    map: HashMap<K, usize>,
}

impl<K> Default for Places<K> {
    fn default() -> Self {
        Places {
            items: Vec::new(),
            map: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + Hash> Places<K> {
    /// The most items found by a scan.
    const SCANNED: usize = 16;

    /// `item`'s place, and whether it was new.
    fn place(&mut self, item: K) -> (usize, bool) {
        let found = if self.items.len() <= Self::SCANNED {
            self.items.iter().position(|i| *i == item)
        } else {
            self.map.get(&item).copied()
        };
        if let Some(i) = found {
            return (i, false);
        }
        let i = self.items.len();
        self.items.push(item);
        if self.items.len() == Self::SCANNED + 1 {
            self.map = (self.items.iter().enumerate())
                .map(|(i, k)| (*k, i))
                .collect();
        } else if self.items.len() > Self::SCANNED {
            self.map.insert(item, i);
        }
        (i, true)
    }
}

/// `numbers` as one MessagePack array (the script's `ARGV[1]`: Redis's Lua reads it in one
/// call, where it reads each decimal string with `strtod`), each number in its shortest form.
fn packed(numbers: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + 9 * numbers.len());
    // Writing to a `Vec` cannot fail.
    let _ = rmp::encode::write_array_len(&mut out, numbers.len() as u32);
    for &n in numbers {
        let _ = rmp::encode::write_uint(&mut out, n);
    }
    out
}

/// The script's answer: one MessagePack array of integers.
fn unpacked(answer: &[u8]) -> Result<Vec<i64>, StoreError> {
    let bad = |what: String| {
        StoreError(format!(
            "redis: the counts' script answered {} bytes that are not an array of integers: {what}",
            answer.len()
        ))
    };
    let mut rest = answer;
    let len = rmp::decode::read_array_len(&mut rest).map_err(|e| bad(e.to_string()))?;
    // Each number takes a byte at least: a length past what is left is not believed.
    let mut numbers = Vec::with_capacity((len as usize).min(rest.len()));
    for i in 0..len {
        let n = rmp::decode::read_int(&mut rest).map_err(|e| bad(format!("number {i}: {e}")))?;
        numbers.push(n);
    }
    if !rest.is_empty() {
        return Err(bad(format!("{} bytes after the array", rest.len())));
    }
    Ok(numbers)
}

/// The verdicts of `reservations` in the script's `answer`, in turn; an answer of
/// another shape is the whole call's error.
fn verdicts(
    answer: &[i64],
    reservations: &[&[Charge]],
) -> Result<Vec<Result<Verdict, StoreError>>, StoreError> {
    let mut rest = answer;
    let mut verdicts = Vec::with_capacity(reservations.len());
    for (i, charges) in reservations.iter().enumerate() {
        let len = match rest.first() {
            Some(1) => 2 + 2 * charges.len(),
            Some(0) => 5,
            _ => 0,
        };
        if len == 0 || rest.len() < len {
            return Err(StoreError(format!(
                "redis: the counts' script answered {:?} where reservation {} of {} had its verdict",
                &rest[..rest.len().min(8)],
                i + 1,
                reservations.len()
            )));
        }
        let (this, after) = rest.split_at(len);
        verdicts.push(verdict(this, charges));
        rest = after;
    }
    if !rest.is_empty() {
        return Err(StoreError(format!(
            "redis: the counts' script answered {} numbers more than {} verdicts",
            rest.len(),
            reservations.len()
        )));
    }
    Ok(verdicts)
}

/// The verdict the script answered for a reservation of `charges`.
fn verdict(answer: &[i64], charges: &[Charge]) -> Result<Verdict, StoreError> {
    match answer {
        [1, now, windows @ ..] if windows.len() == 2 * charges.len() => Ok(Verdict::Reserved {
            now: (*now).max(0) as u64,
            windows: (windows.chunks_exact(2))
                .map(|w| Window {
                    start: w[0].max(0) as u64,
                    amount: w[1].max(0) as u64,
                })
                .collect(),
        }),
        [0, index, reset, used, in_flight] => Ok(Verdict::Refused {
            index: (*index).max(0) as usize,
            reset_ms: (*reset).max(0) as u64,
            used: (*used).max(0) as u64,
            in_flight: *in_flight == 1,
        }),
        other => Err(StoreError(format!(
            "redis: the counts' script answered {other:?} for a reservation"
        ))),
    }
}

/// The settlements a call carries. Lost with the call (its error, or its deadline dropping
/// it before Redis answered), they are counted as a failed settlement, as a failed batch of
/// the store's task is.
struct Carried<'a> {
    adjusts: Vec<Adjust>,
    health: Option<&'a Health>,
}

impl Carried<'_> {
    /// The call answered: its settlements applied, or lost with its `error`.
    fn answered(mut self, error: Option<&StoreError>) {
        let adjusts = std::mem::take(&mut self.adjusts);
        if let (Some(e), Some(health), false) = (error, self.health, adjusts.is_empty()) {
            health.failed("settle", e);
        }
    }
}

impl Drop for Carried<'_> {
    fn drop(&mut self) {
        if let (Some(health), false) = (self.health, self.adjusts.is_empty()) {
            let e = StoreError(format!(
                "{} settlements lost with a call dropped before Redis answered",
                self.adjusts.len()
            ));
            health.failed("settle", &e);
        }
    }
}

impl Store for Redis {
    fn reserve<'a>(&'a self, charges: &'a [Charge]) -> StoreFuture<'a, Verdict> {
        Box::pin(async move {
            // The settlements' task runs before the first reservation is made.
            self.0.later();
            batch::reserve(&self.0, charges).await
        })
    }

    fn peek<'a>(&'a self, counters: &'a [Peek]) -> StoreFuture<'a, Seen> {
        Box::pin(async move {
            let mut connection = self.0.connection().await?;
            let script = redis::Script::new(PEEK);
            let mut call = script.prepare_invoke();
            for p in counters {
                call.key(&*p.counter);
            }
            let got: Vec<i64> = call
                .invoke_async(&mut connection)
                .await
                .map_err(store_error)?;
            let now = got.first().copied().unwrap_or(0).max(0) as u64;
            let windows = (counters.iter().enumerate())
                .map(|(i, p)| {
                    let at = |k: usize| got.get(1 + 3 * i + k).copied().unwrap_or(-1);
                    let start = u64::try_from(at(0)).ok()?;
                    let (amount, held) = (at(1).max(0) as u64, at(2).max(0) as u64);
                    (now < start.saturating_add(p.window_ms)).then_some((start, amount, held))
                })
                .collect();
            Ok(Seen { now, windows })
        })
    }

    fn settle_later(&self, adjusts: Vec<Adjust>) {
        let Some(later) = self.0.later() else {
            tracing::warn!("a settlement of the limits' counts was made outside the runtime: lost");
            return;
        };
        if self.0.pending.push(adjusts) {
            // The wake-up queue holds one: when it is full, the task is woken already.
            let _ = later.try_send(());
        } else if let Some(health) = self.0.health.get() {
            health.failed(
                "settle",
                &StoreError(format!(
                    "{QUEUED} requests' settlements wait for Redis already: this one is dropped"
                )),
            );
        }
    }
}

/// Each counter's window as it is (`{now, s, v, h, s, v, h...}`, -1 for a counter with
/// none), without changing it.
const PEEK: &str = r"
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
for i, key in ipairs(KEYS) do
  local got = redis.call('HMGET', key, 's', 'v', 'h')
  out[3 * i - 1] = tonumber(got[1]) or -1
  out[3 * i] = tonumber(got[2]) or 0
  out[3 * i + 1] = tonumber(got[3]) or 0
end
return out";

/// The task that applies the settlements no reservation carried, a batch per script call.
struct Settler {
    client: redis::Client,
    connection: Option<ConnectionManager>,
    timeout: Duration,
    script: Arc<redis::Script>,
    health: Option<Arc<Health>>,
    pending: Arc<Pending>,
}

impl Settler {
    /// Woken by each settlement queued, it waits [`LINGER`] for a reservation to carry the
    /// settlements, then applies what is left; it ends once its store is dropped.
    async fn run(mut self, mut woken: mpsc::Receiver<()>) {
        while woken.recv().await.is_some() {
            tokio::time::sleep(LINGER).await;
            loop {
                let adjusts = self.pending.take();
                if adjusts.is_empty() {
                    break;
                }
                let applied = tokio::time::timeout(self.timeout, self.apply(&adjusts)).await;
                let applied = applied.unwrap_or_else(|_| {
                    Err(StoreError(format!(
                        "no answer within state_timeout_ms ({} ms)",
                        self.timeout.as_millis()
                    )))
                });
                match (&self.health, applied) {
                    (Some(health), Ok(())) => health.answered(),
                    (Some(health), Err(e)) => health.failed("settle", &e),
                    (None, _) => {}
                }
            }
        }
    }

    async fn apply(&mut self, adjusts: &[Adjust]) -> Result<(), StoreError> {
        if self.connection.is_none() {
            self.connection = Some(manager(&self.client, self.timeout)?);
        }
        let Some(connection) = self.connection.as_mut() else {
            return Ok(());
        };
        counts_on(&self.script, connection, adjusts, &[])
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// How many reservations the script answered by their sums, and one by one, in this
    /// process's tests.
    pub(super) static ANSWERED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

    /// The settlements a reservation's call carries are never lost silently: applied, they
    /// count nothing; lost with the call's error, or with the call dropped before Redis
    /// answered (its caller's deadline), they count as failed settlements.
    #[test]
    fn settlements_lost_with_a_reservation_are_counted() {
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let health = Health::new(
            metrics.clone(),
            crate::config::OnStateError::Allow,
            "redis://127.0.0.1:1".into(),
        );
        let failed = || {
            let text = metrics.encode();
            (text.lines())
                .find(|l| l.starts_with("choicewise_state_errors_total{op=\"settle\"}"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let adjust = || Adjust {
            counter: Arc::from("k"),
            slot: 0,
            start: 0,
            window_ms: 60_000,
            held: 5,
            used: 3,
        };
        let carried = |adjusts: Vec<Adjust>| Carried {
            adjusts,
            health: Some(&health),
        };
        carried(vec![adjust()]).answered(None);
        carried(Vec::new()).answered(Some(&StoreError("down".into())));
        assert_eq!(failed(), 0, "applied, or nothing carried");
        carried(vec![adjust()]).answered(Some(&StoreError("down".into())));
        assert_eq!(failed(), 1, "lost with the call's error");
        drop(carried(vec![adjust(), adjust()]));
        assert_eq!(failed(), 2, "lost with the call dropped");
    }

    /// The numbers go as MessagePack, each in its shortest form (a window's start in
    /// milliseconds, a count up to 2^53 as `uint 64`), and the answer comes back the same
    /// way; an answer that is not an array of integers is an error, not a guess.
    #[test]
    fn the_numbers_go_and_come_as_messagepack() {
        let mut want = vec![0x94, 0, 127, 0xcd, 0xea, 0x60, 0xcf];
        want.extend_from_slice(&1_796_013_333_915_u64.to_be_bytes());
        assert_eq!(packed(&[0, 127, 60_000, 1_796_013_333_915]), want);
        assert_eq!(packed(&[]), [0x90]);
        let long: Vec<u64> = (0..20).collect();
        assert_eq!(&packed(&long)[..3], [0xdc, 0, 20]);
        assert_eq!(
            unpacked(&want).unwrap(),
            [0, 127, 60_000, 1_796_013_333_915]
        );
        // Lua's cmsgpack writes a negative integer as a signed one.
        assert_eq!(unpacked(&[0x92, 0xff, 0xd0, 0x80]).unwrap(), [-1, -128]);
        let e = unpacked(&[0x92, 1]).unwrap_err();
        assert!(e.0.contains("number 1"), "{e}");
        let e = unpacked(&[0x91, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap_err();
        assert!(e.0.contains("not an array of integers"), "{e}");
        let e = unpacked(&[0x91, 1, 2]).unwrap_err();
        assert!(e.0.contains("1 bytes after the array"), "{e}");
        let e = unpacked(b"OK").unwrap_err();
        assert!(e.0.contains("2 bytes"), "{e}");
        // A length no answer of this size could hold.
        assert!(unpacked(&[0xdd, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    /// A call names each counter once, whoever names it; the settlements of one counter's
    /// window go as one (their amounts added), those of another window on their own; the
    /// charges of one counter are added into its sum; each settlement, sum and charge names
    /// its counter by its place in the keys, from 1.
    #[test]
    fn a_call_names_each_counter_once_and_sums_its_charges() {
        let adjust = |name: &str, slot, start, held, used| Adjust {
            counter: Arc::from(name),
            slot,
            start,
            window_ms: 60_000,
            held,
            used,
        };
        let adjusts = [
            adjust("k:tokens", 2, 1_000, 300, 250),
            adjust("k:samples", 1, 1_000, 1, 1),
            adjust("k:tokens", 2, 1_000, 300, 120),
            adjust("k:tokens", 2, 61_000, 300, 7),
            adjust("k:samples", 1, 1_000, 1, 0),
        ];
        let names = ["k:requests", "k:samples", "k:tokens"];
        let mut first = vec![charge(&names, 0, 9, 1), charge(&names, 2, 5_000, 300)];
        first[0].hold = 0;
        let second = [charge(&names, 2, 5_000, 200)];
        let arguments = Arguments::of(&adjusts, &[&first, &second]);
        assert_eq!(arguments.keys, ["k:tokens", "k:samples", "k:requests"]);
        #[rustfmt::skip]
        let want = vec![
            3, 2, 1,
            1, 1_000, 60_000, 600, 370,
            2, 1_000, 60_000, 2, 1,
            1, 61_000, 60_000, 300, 7,
            3, 60_000, 9, 1, 0,
            1, 60_000, 5_000, 500, 500,
        ];
        assert_eq!(arguments.numbers, want);
        #[rustfmt::skip]
        let want = vec![
            2,
            2, 3, 60_000, 9, 1, 0, 1, 60_000, 5_000, 300, 300,
            1, 1, 60_000, 5_000, 200, 200,
        ];
        assert_eq!(arguments.reservations, want);
        assert_eq!(arguments.sums, [0, 1, 1]);

        // All reserved: each reservation's window holds what the ones before it and its own
        // charge added to what the sum's counter held.
        let got = arguments.verdicts(&[1, 70, 40, 2, 45, 1_000], &[&first, &second]);
        let windows = |w: &[(u64, u64)]| -> Vec<Window> {
            (w.iter())
                .map(|&(start, amount)| Window { start, amount })
                .collect()
        };
        assert_eq!(
            got.unwrap(),
            [
                Ok(Verdict::Reserved {
                    now: 70,
                    windows: windows(&[(40, 3), (45, 1_300)])
                }),
                Ok(Verdict::Reserved {
                    now: 70,
                    windows: windows(&[(45, 1_500)])
                }),
            ]
        );
        let e = (arguments.verdicts(&[1, 70, 40, 2], &[&first, &second])).unwrap_err();
        assert!(e.0.contains("2 numbers for 2 counters' windows"), "{e}");
        let e = (arguments.verdicts(&[2, 70], &[&first, &second])).unwrap_err();
        assert!(e.0.contains("[2, 70], neither of its answers"), "{e}");

        // A counter charged under two limits (its key's limits changed between two
        // requests): the sums cannot stand for the reservations.
        let mut changed = second.clone();
        changed[0].limit = 6_000;
        let arguments = Arguments::of(&[], &[&first, &changed]);
        assert_eq!(arguments.numbers[..3], [0, 2, 0]);

        // Past the scan's reach the map finds them: 40 counters named twice each.
        let many: Vec<String> = (0..40).map(|i| format!("k:{i}")).collect();
        let many: Vec<&str> = many.iter().map(|n| &n[..]).collect();
        let charges: Vec<Charge> = (0..80).map(|i| charge(&many, i % 40, 9, 1)).collect();
        let arguments = Arguments::of(&[], &[&charges]);
        assert_eq!(arguments.keys, many);
        let places: Vec<u64> = arguments.reservations[2..]
            .chunks(5)
            .map(|c| c[0])
            .collect();
        let want: Vec<u64> = (0..80).map(|i| 1 + i % 40).collect();
        assert_eq!(places, want);
        let want: Vec<usize> = (0..80).map(|i| i % 40).collect();
        assert_eq!(arguments.sums, want);
        assert_eq!(arguments.numbers[..3], [0, 40, 1]);
    }

    /// The script's flat answer is read a verdict at a time, each as long as its kind
    /// says; an answer short of one, or with numbers left over, fails the call.
    #[test]
    fn the_answer_is_read_a_verdict_at_a_time() {
        let names = ["k:a", "k:b"];
        let two = [charge(&names, 0, 9, 1), charge(&names, 1, 9, 1)];
        let one = [charge(&names, 0, 9, 1)];
        let answer = [1, 50, 40, 3, 45, 4, 0, 1, 900, 9, 1, 1, 50, 40, 4];
        let got = verdicts(&answer, &[&two, &two, &one]).unwrap();
        let windows = |w: &[(u64, u64)]| -> Vec<Window> {
            w.iter()
                .map(|&(start, amount)| Window { start, amount })
                .collect()
        };
        assert_eq!(
            got,
            [
                Ok(Verdict::Reserved {
                    now: 50,
                    windows: windows(&[(40, 3), (45, 4)])
                }),
                Ok(Verdict::Refused {
                    index: 1,
                    reset_ms: 900,
                    used: 9,
                    in_flight: true
                }),
                Ok(Verdict::Reserved {
                    now: 50,
                    windows: windows(&[(40, 4)])
                }),
            ]
        );
        let e = verdicts(&answer[..14], &[&two, &two, &one]).unwrap_err();
        assert!(e.0.contains("reservation 3 of 3"), "{e}");
        let e = verdicts(&answer, &[&two, &two]).unwrap_err();
        assert!(e.0.contains("4 numbers more than 2 verdicts"), "{e}");
        let e = verdicts(&[7, 1, 2], &[&one]).unwrap_err();
        assert!(e.0.contains("[7, 1, 2] where reservation 1 of 1"), "{e}");
        assert_eq!(verdicts(&[], &[]).unwrap(), []);
    }

    #[test]
    fn urls_are_checked_and_shown_without_their_password() {
        use crate::config::redis_client;
        use choicewise_records::shown_url as shown;
        assert!(redis_client("redis://127.0.0.1:6379").is_ok());
        assert!(redis_client("redis://:secret@127.0.0.1:6379/2").is_ok());
        let e = redis_client("http://127.0.0.1:6379").unwrap_err();
        assert!(e.contains("redis://"), "{e}");
        let e = redis_client("rediss://h:1").unwrap_err();
        assert!(e.contains("TLS"), "{e}");
        assert_eq!(
            shown("redis://:secret@127.0.0.1:6379/2"),
            "redis://:***@127.0.0.1:6379/2"
        );
        assert_eq!(shown("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }

    /// A child process, ended when dropped (a failing test too).
    struct Ended(std::process::Child);

    impl Drop for Ended {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A `redis-server` of the test's own on a free port of 127.0.0.1 (its process ended
    /// when dropped), or `None` (said) where it is not installed; under CI its absence fails.
    fn redis_server() -> Option<(Ended, u16, tempfile::TempDir)> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let found = (std::env::split_paths(&path).chain(["/usr/bin".into(), "/usr/sbin".into()]))
            .map(|dir: std::path::PathBuf| dir.join("redis-server"))
            .find(|p| p.is_file());
        let Some(bin) = found else {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "redis-server is not installed, and CI=true: .ci/run installs it"
            );
            eprintln!("skipped: redis-server is not installed");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new(bin)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Some((Ended(child), port, dir))
    }

    /// A connection to the test's `redis-server` on `port`, once it answers.
    async fn connected(port: u16) -> ConnectionManager {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match client.get_connection_manager().await {
                Ok(c) => break c,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("redis-server did not answer: {e}"),
            }
        }
    }

    /// The store on the test's `redis-server` on `port`, its calls bounded by 5 s.
    fn store_on(port: u16) -> Arc<Redis> {
        let url = format!("redis://127.0.0.1:{port}");
        Arc::new(Redis::new(&url, Duration::from_secs(5)).unwrap())
    }

    /// `adjusts` applied by a call of their own.
    async fn settle(
        script: &redis::Script,
        connection: &mut ConnectionManager,
        adjusts: &[Adjust],
    ) -> Result<(), StoreError> {
        counts_on(script, connection, adjusts, &[]).await.map(drop)
    }

    /// How many times Redis ran each command since its statistics were reset
    /// (`INFO commandstats`), scripts' inner commands included, `CONFIG`'s and `INFO`'s
    /// left out.
    async fn commands_run(connection: &mut ConnectionManager) -> Vec<(String, u64)> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(connection)
            .await
            .unwrap();
        let mut run: Vec<(String, u64)> = (info.lines())
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
                let calls = rest.split(',').next()?.parse().ok()?;
                let ours = !name.starts_with("config") && name != "info";
                ours.then(|| (name.to_owned(), calls))
            })
            .collect();
        run.sort();
        run
    }

    /// Redis's statistics of commands begun again.
    async fn reset_commands(connection: &mut ConnectionManager) {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(connection)
            .await
            .unwrap();
    }

    /// A charge of `amount` (all of it held) on counter `slot` of `names`, a minute's window.
    fn charge(names: &[&str], slot: usize, limit: u64, amount: u64) -> Charge {
        Charge {
            counter: Arc::from(names[slot]),
            slot,
            window_ms: 60_000,
            limit,
            amount,
            hold: amount,
        }
    }

    /// A call reads each counter it names once and writes it once, however many of the
    /// settlements and reservations it carries name the same counters: Redis runs one
    /// `HMGET` and one `HSET` a counter, not a command per settlement, charge and field.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_reads_and_writes_each_counter_once() {
        let Some((_server, port, _dir)) = redis_server() else {
            return;
        };
        let mut connection = connected(port).await;
        let script = redis::Script::new(COUNTS);
        let names = ["k:requests", "k:samples", "k:tokens"];
        let charges: Vec<Charge> = (0..3).map(|i| charge(&names, i, 1_000, 10)).collect();
        let first = counts_on(&script, &mut connection, &[], &[&charges]).await;
        let Ok(Verdict::Reserved { windows, .. }) = first.unwrap().remove(0) else {
            panic!("the first reservation was refused");
        };
        reset_commands(&mut connection).await;
        // Four requests' settlements of the same three counters ride with three requests'
        // reservations of them.
        let adjusts: Vec<Adjust> = (0..4)
            .flat_map(|_| charges.iter().zip(&windows))
            .map(|(c, w)| Adjust {
                counter: c.counter.clone(),
                slot: c.slot,
                start: w.start,
                window_ms: c.window_ms,
                held: 10,
                used: 3,
            })
            .collect();
        let each = [&charges[..], &charges[..], &charges[..]];
        let verdicts = counts_on(&script, &mut connection, &adjusts, &each).await;
        let amounts: Vec<Vec<u64>> = (verdicts.unwrap().into_iter())
            .map(|v| match v {
                Ok(Verdict::Reserved { windows, .. }) => windows.iter().map(|w| w.amount).collect(),
                other => panic!("{other:?}"),
            })
            .collect();
        // 10 reserved; 4 settlements each giving back 7 of the 10 it held (the count
        // floored at 0); then 10 more reserved three times, one after the other.
        assert_eq!(
            amounts,
            [[10; 3], [20; 3], [30; 3]],
            "the counts after each"
        );
        let run = commands_run(&mut connection).await;
        let want: Vec<(String, u64)> = [("evalsha", 1), ("hmget", 3), ("hset", 3), ("time", 1)]
            .map(|(name, calls)| (name.to_owned(), calls))
            .into();
        assert_eq!(run, want, "the commands of one call");
    }

    /// Reservations made at once through the store are grouped into fewer calls than
    /// requests, and each is still checked after the ones before it: of 200 requests of
    /// one unit against a limit of 120, exactly 120 are reserved.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reservations_made_at_once_share_calls_and_the_limit_holds() {
        let Some((_server, port, _dir)) = redis_server() else {
            return;
        };
        let mut connection = connected(port).await;
        let store = store_on(port);
        reset_commands(&mut connection).await;
        let names = ["k:requests"];
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let store = store.clone();
                let charges = [charge(&names, 0, 120, 1)];
                tokio::spawn(async move { store.reserve(&charges).await })
            })
            .collect();
        let mut reserved = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(Verdict::Reserved { .. }) => reserved += 1,
                Ok(Verdict::Refused { index: 0, .. }) => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(reserved, 120, "reserved against a limit of 120");
        let run = commands_run(&mut connection).await;
        let calls = run.iter().find(|(n, _)| n == "evalsha" || n == "eval");
        let calls = calls.map_or(0, |c| c.1);
        eprintln!("200 reservations in {calls} calls");
        assert!(
            (1..200).contains(&calls),
            "{calls} calls for 200 reservations"
        );
        let count: u64 = redis::cmd("HGET")
            .arg(names[0])
            .arg("v")
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(count, 120, "the counter");
    }

    /// Requests whose deadlines drop them while Redis does not answer (its clients paused)
    /// leave no reservation waiting for ever: the calls they led go on without them, the
    /// lead is handed on, and once Redis answers again a reservation is made at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_dropped_by_their_deadlines_leave_no_call_stuck() {
        let Some((_server, port, _dir)) = redis_server() else {
            return;
        };
        let mut connection = connected(port).await;
        let store = store_on(port);
        let charges = [charge(&["k:requests"], 0, 1_000_000, 1)];
        // The connection is made, and the script loaded, before Redis pauses.
        assert!(matches!(
            store.reserve(&charges).await,
            Ok(Verdict::Reserved { .. })
        ));
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            // Long past every deadline below, even on a loaded machine.
            .arg(2_000)
            .arg("WRITE")
            .query_async(&mut connection)
            .await
            .unwrap();
        let tasks: Vec<_> = (0..50)
            .map(|i| {
                let store = store.clone();
                let charges = charges.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(i % 10)).await;
                    let deadline = Duration::from_millis(20 + 5 * (i % 7));
                    tokio::time::timeout(deadline, store.reserve(&charges)).await
                })
            })
            .collect();
        for task in tasks {
            assert!(
                task.await.unwrap().is_err(),
                "Redis is paused: the deadline passes"
            );
        }
        let after = tokio::time::timeout(Duration::from_secs(5), store.reserve(&charges)).await;
        assert!(
            matches!(after, Ok(Ok(Verdict::Reserved { .. }))),
            "a reservation after the pause: {after:?}"
        );
    }

    /// Redis's clock, in milliseconds.
    async fn redis_now(connection: &mut ConnectionManager) -> u64 {
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(connection).await.unwrap();
        secs * 1000 + micros / 1000
    }

    /// Each counter `names[slot]` holds in Redis what `memory` holds: its amount and its
    /// held part (`when` names the moment in a failure).
    async fn same_counters(
        connection: &mut ConnectionManager,
        memory: &super::super::store::Memory,
        names: &[&str],
        when: &str,
    ) {
        for (slot, name) in names.iter().enumerate() {
            let got: (Option<u64>, Option<u64>) = redis::cmd("HMGET")
                .arg(*name)
                .arg("v")
                .arg("h")
                .query_async(connection)
                .await
                .unwrap();
            let want = memory.amount(slot).map(|(_, v, h)| (v, h));
            assert_eq!(got.0.zip(got.1), want, "{when}: counter {name}");
        }
    }

    /// One rule, two stores: 10,000 random reservations and settlements (several counters,
    /// limits of a few units, settlements that use less or more than they held, half of them
    /// carried by the next reservation's call, and every 40 operations a window replaced and
    /// the open reservations settled late into the next) given to the in-process store and
    /// to a real `redis-server`, at the same
    /// moments of Redis's clock: every verdict the same (reserved or refused, which limit,
    /// whether requests in flight held it), and every counter the same after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_in_process_store_and_redis_give_the_same_verdicts() {
        use super::super::store::Memory;
        let Some((_server, port, _dir)) = redis_server() else {
            return;
        };
        let mut connection = connected(port).await;
        let script = redis::Script::new(COUNTS);
        // The script reads Redis's clock, the in-process store is given Redis's `TIME` read
        // after each call: the windows are an hour long, so that no window ends between the
        // two, and a window is replaced by hand (its counters deleted in both) to settle
        // reservations late, into the windows that follow.
        let mut memory = Memory::default();
        let names = ["k:a", "k:b", "k:c"];
        let limits = [5_u64, 3, 9];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        // Reservations not yet settled: each counter's number, its window's start in Redis
        // and in the process (each store stamps its own clock), and what it holds.
        let mut open: Vec<Vec<(usize, u64, u64, u64)>> = Vec::new();
        // Settlements left for the next reservation to carry, as Redis and the process
        // stamp them.
        let mut carried: Vec<(Adjust, Adjust)> = Vec::new();
        let window = 3_600_000;
        let (mut reserved, mut refused, mut in_flight) = (0, 0, 0);
        for op in 0..10_000 {
            if open.is_empty() || next(3) != 0 {
                // One to three reservations in one call, each of 1 to 3 counters, each 1 to
                // 4, held or not.
                let group = 1 + next(3);
                let reservations: Vec<Vec<Charge>> = (0..group)
                    .map(|_| {
                        let mut chosen: Vec<usize> = (0..3).filter(|_| next(2) == 0).collect();
                        if chosen.is_empty() {
                            chosen.push(next(3) as usize);
                        }
                        (chosen.iter())
                            .map(|&i| {
                                let amount = 1 + next(4);
                                Charge {
                                    counter: Arc::from(names[i]),
                                    slot: i,
                                    window_ms: window,
                                    limit: limits[i],
                                    amount,
                                    hold: if next(4) == 0 { 0 } else { amount },
                                }
                            })
                            .collect()
                    })
                    .collect();
                // The settlements waiting ride with them, settled first.
                let adjusts: Vec<Adjust> = carried.iter().map(|c| c.0.clone()).collect();
                let each: Vec<&[Charge]> = reservations.iter().map(|r| &r[..]).collect();
                let by_redis = counts_on(&script, &mut connection, &adjusts, &each).await;
                let by_redis = by_redis.unwrap();
                assert_eq!(by_redis.len(), reservations.len(), "op {op}");
                let now = redis_now(&mut connection).await;
                let carried_in_memory: Vec<Adjust> = carried.drain(..).map(|c| c.1).collect();
                memory.apply_at(&carried_in_memory, 0);
                for (charges, by_redis) in reservations.iter().zip(by_redis) {
                    let by_redis = by_redis.unwrap();
                    let by_memory = memory.reserve_at(charges, now);
                    match (&by_memory, &by_redis) {
                        (
                            Verdict::Reserved { windows: m, .. },
                            Verdict::Reserved { windows: r, .. },
                        ) => {
                            let amounts =
                                |w: &[Window]| w.iter().map(|w| w.amount).collect::<Vec<_>>();
                            assert_eq!(amounts(m), amounts(r), "op {op}: {charges:?}");
                            reserved += 1;
                            open.push(
                                (charges.iter().zip(r).zip(m))
                                    .map(|((c, r), m)| (c.slot, r.start, m.start, c.hold))
                                    .collect(),
                            );
                        }
                        (
                            Verdict::Refused {
                                index: a,
                                used: u,
                                in_flight: x,
                                ..
                            },
                            Verdict::Refused {
                                index: b,
                                used: v,
                                in_flight: y,
                                ..
                            },
                        ) => {
                            assert_eq!((a, u, x), (b, v, y), "op {op}: {charges:?}");
                            refused += 1;
                            in_flight += usize::from(*x);
                        }
                        _ => {
                            panic!("op {op}: memory {by_memory:?}, redis {by_redis:?}, {charges:?}")
                        }
                    }
                }
            } else {
                // Settle one of the open reservations, using 0 to what it held (or more).
                let i = next(open.len() as u64) as usize;
                let held = open.swap_remove(i);
                let adjusts = |in_redis: bool, used: &[u64]| -> Vec<Adjust> {
                    (held.iter().zip(used))
                        .map(|(&(slot, redis_start, memory_start, hold), &used)| Adjust {
                            counter: Arc::from(names[slot]),
                            slot,
                            start: if in_redis { redis_start } else { memory_start },
                            window_ms: window,
                            held: hold,
                            used,
                        })
                        .collect()
                };
                let used: Vec<u64> = held.iter().map(|h| next(h.3 + 2)).collect();
                if next(2) == 0 {
                    // Left for the next reservation to carry.
                    carried.extend(adjusts(true, &used).into_iter().zip(adjusts(false, &used)));
                } else {
                    settle(&script, &mut connection, &adjusts(true, &used))
                        .await
                        .unwrap();
                    memory.apply_at(&adjusts(false, &used), 0);
                }
            }
            if op % 40 == 39 || op == 9_999 {
                // What no reservation carried is applied on its own (as the store's task
                // does).
                let (in_redis, in_memory): (Vec<Adjust>, Vec<Adjust>) = carried.drain(..).unzip();
                settle(&script, &mut connection, &in_redis).await.unwrap();
                memory.apply_at(&in_memory, 0);
            }
            if op % 40 == 39 {
                // A window replaced: the counters begin again in both, and every open
                // reservation settles late, into the new windows.
                for name in names {
                    let _: i64 = redis::cmd("DEL")
                        .arg(name)
                        .query_async(&mut connection)
                        .await
                        .unwrap();
                }
                let fresh = Memory::default();
                let late = |in_redis: bool| -> Vec<Adjust> {
                    (open.iter().flatten())
                        .map(|&(slot, redis_start, memory_start, hold)| Adjust {
                            counter: Arc::from(names[slot]),
                            slot,
                            start: if in_redis { redis_start } else { memory_start },
                            window_ms: window,
                            held: hold,
                            used: hold,
                        })
                        .collect()
                };
                settle(&script, &mut connection, &late(true)).await.unwrap();
                let now = redis_now(&mut connection).await;
                fresh.apply_at(&late(false), now);
                open.clear();
                same_counters(&mut connection, &fresh, &names, &format!("op {op}, late")).await;
                // Both go on from the late settlements' windows.
                memory = fresh;
            }
        }
        same_counters(&mut connection, &memory, &names, "the end").await;
        eprintln!(
            "{reserved} reserved, {refused} refused, {in_flight} of them by requests in flight"
        );
        assert!(
            reserved > 1_000 && refused > 1_000 && in_flight > 100,
            "{reserved} reserved, {refused} refused, {in_flight} of them by requests in flight"
        );
        // Both of the script's ways were taken: the sums standing for the reservations, and
        // the reservations checked one by one.
        let answered = ANSWERED.each_ref().map(|a| a.load(Ordering::Relaxed));
        assert!(
            answered[0] > 500 && answered[1] > 1_000,
            "answered by their sums and one by one: {answered:?}"
        );
    }
}
