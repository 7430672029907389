//! The counts in Redis (`[state] redis_url`; Valkey speaks the same protocol): shared by
//! every replica, kept across restarts. One Lua script per reservation and one per
//! settlement, each atomic: a counter is a hash of its window's start (`s`, milliseconds of
//! the Redis server's clock, so that the replicas' clocks do not matter) and its amount
//! (`v`), expiring a second after its window ends.
//!
//! The connection is `redis`'s connection manager (it reconnects by itself), made on first
//! use, inside the runtime. Settlements are made without waiting by a task of the store's:
//! queued (at most [`QUEUED`] requests' worth; past that one is dropped and counted as a
//! failure), applied in batches of one script call each, under the same deadline.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{OnceCell, mpsc};

use super::Health;
use super::store::{Adjust, Charge, Store, StoreError, StoreFuture, Verdict};
use crate::config::ConfigError;

/// Checks every charge against its counter's window, then charges them all; returns
/// `{1, start...}`, or `{0, index, reset_ms}` for the first that would pass its limit.
const RESERVE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local starts = {}
local fresh = {}
for i, key in ipairs(KEYS) do
  local w = tonumber(ARGV[3 * i - 2])
  local limit = tonumber(ARGV[3 * i - 1])
  local amount = tonumber(ARGV[3 * i])
  local held = redis.call('HMGET', key, 's', 'v')
  local s = tonumber(held[1])
  local used = tonumber(held[2]) or 0
  if s == nil or now >= s + w then
    s = now
    used = 0
    fresh[i] = true
  end
  if used + amount > limit then
    return {0, i - 1, s + w - now}
  end
  starts[i] = s
end
local out = {1}
for i, key in ipairs(KEYS) do
  -- Counts are written as the decimal strings they came as: a Lua number written back
  -- would be rounded to 14 digits.
  local s = string.format('%d', starts[i])
  if fresh[i] then
    redis.call('HSET', key, 's', s, 'v', ARGV[3 * i])
    redis.call('PEXPIREAT', key, string.format('%d', starts[i] + tonumber(ARGV[3 * i - 2]) + 1000))
  else
    redis.call('HINCRBY', key, 'v', ARGV[3 * i])
  end
  out[i + 1] = starts[i]
end
return out
";

/// Adds each delta to its counter if the counter's window is still the one given, never
/// taking a count below 0.
const SETTLE: &str = r"
for i, key in ipairs(KEYS) do
  local s = tonumber(redis.call('HGET', key, 's'))
  if s ~= nil and s == tonumber(ARGV[2 * i - 1]) then
    local v = redis.call('HINCRBY', key, 'v', ARGV[2 * i])
    if v < 0 then
      redis.call('HSET', key, 'v', 0)
    end
  end
end
return 1
";

/// The most requests' settlements waiting for the store's task.
const QUEUED: usize = 4096;

/// The most requests' settlements applied by one script call.
const BATCH: usize = 256;

/// The counts in Redis.
pub(crate) struct Redis {
    client: redis::Client,
    timeout: Duration,
    connection: OnceCell<ConnectionManager>,
    reserve: redis::Script,
    settle: Arc<redis::Script>,
    /// The queue of the task that applies settlements, once started.
    later: OnceLock<mpsc::Sender<Vec<Adjust>>>,
    health: OnceLock<Arc<Health>>,
}

impl Redis {
    /// A store on `url` whose calls take at most `timeout`; nothing is connected yet.
    pub(crate) fn new(url: &str, timeout: Duration) -> Result<Redis, ConfigError> {
        let client = crate::config::redis_client(url)
            .map_err(|e| ConfigError(format!("[state] redis_url: {e}")))?;
        Ok(Redis {
            client,
            timeout,
            connection: OnceCell::new(),
            reserve: redis::Script::new(RESERVE),
            settle: Arc::new(redis::Script::new(SETTLE)),
            later: OnceLock::new(),
            health: OnceLock::new(),
        })
    }

    /// Its failures and recoveries are told to `health`.
    pub(crate) fn watch(&self, health: Arc<Health>) {
        let _ = self.health.set(health);
    }

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

    /// `PING`.
    pub(crate) async fn ping(&self) -> Result<(), String> {
        let mut connection = self.connection().await.map_err(|e| e.0)?;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map(drop)
            .map_err(|e| store_error(e).0)
    }

    /// The task that applies settlements queued by [`Store::settle_later`], started once,
    /// inside the runtime.
    fn later(&self) -> Option<&mpsc::Sender<Vec<Adjust>>> {
        if let Some(sender) = self.later.get() {
            return Some(sender);
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (sender, receiver) = mpsc::channel(QUEUED);
        if self.later.set(sender).is_ok() {
            // A connection of its own: a batch of settlements never waits behind the
            // reservations of the requests being admitted.
            let worker = Settler {
                client: self.client.clone(),
                connection: None,
                timeout: self.timeout,
                script: self.settle.clone(),
                health: self.health.get().cloned(),
            };
            runtime.spawn(worker.run(receiver));
        }
        self.later.get()
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

/// Runs the reservation script for `charges` on `connection`.
async fn reserve_on(
    script: &redis::Script,
    connection: &mut ConnectionManager,
    charges: &[Charge],
) -> Result<Verdict, StoreError> {
    let mut invocation = script.prepare_invoke();
    for c in charges {
        invocation
            .key(&*c.counter)
            .arg(c.window_ms)
            .arg(c.limit)
            .arg(c.amount);
    }
    let out: Vec<i64> = invocation
        .invoke_async(connection)
        .await
        .map_err(store_error)?;
    match out.as_slice() {
        [1, starts @ ..] if starts.len() == charges.len() => Ok(Verdict::Reserved(
            starts.iter().map(|&s| s.max(0) as u64).collect(),
        )),
        [0, index, reset] => Ok(Verdict::Refused {
            index: (*index).max(0) as usize,
            reset_ms: (*reset).max(0) as u64,
        }),
        other => Err(StoreError(format!(
            "redis: the reservation script answered {other:?}"
        ))),
    }
}

/// Runs the settlement script for `adjusts` on `connection`.
async fn settle_on(
    script: &redis::Script,
    connection: &mut ConnectionManager,
    adjusts: &[Adjust],
) -> Result<(), StoreError> {
    let mut invocation = script.prepare_invoke();
    for a in adjusts {
        invocation.key(&*a.counter).arg(a.start).arg(a.delta);
    }
    invocation
        .invoke_async::<i64>(connection)
        .await
        .map(drop)
        .map_err(store_error)
}

impl Store for Redis {
    fn reserve<'a>(&'a self, charges: &'a [Charge]) -> StoreFuture<'a, Verdict> {
        Box::pin(async move {
            // The settlements' task runs before the first reservation is made.
            self.later();
            let mut connection = self.connection().await?;
            reserve_on(&self.reserve, &mut connection, charges).await
        })
    }

    fn settle_later(&self, adjusts: Vec<Adjust>) {
        let Some(later) = self.later() else {
            tracing::warn!("a settlement of the limits' counts was made outside the runtime: lost");
            return;
        };
        if later.try_send(adjusts).is_err()
            && let Some(health) = self.health.get()
        {
            health.failed(
                "settle",
                &StoreError(format!(
                    "{QUEUED} requests' settlements wait for Redis already: this one is dropped"
                )),
            );
        }
    }
}

/// The task that applies queued settlements, a batch per script call.
struct Settler {
    client: redis::Client,
    connection: Option<ConnectionManager>,
    timeout: Duration,
    script: Arc<redis::Script>,
    health: Option<Arc<Health>>,
}

impl Settler {
    async fn run(mut self, mut receiver: mpsc::Receiver<Vec<Adjust>>) {
        let mut batch: Vec<Vec<Adjust>> = Vec::with_capacity(BATCH);
        while receiver.recv_many(&mut batch, BATCH).await > 0 {
            let adjusts: Vec<Adjust> = batch.drain(..).flatten().collect();
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

    async fn apply(&mut self, adjusts: &[Adjust]) -> Result<(), StoreError> {
        if self.connection.is_none() {
            self.connection = Some(manager(&self.client, self.timeout)?);
        }
        let Some(connection) = self.connection.as_mut() else {
            return Ok(());
        };
        settle_on(&self.script, connection, adjusts).await
    }
}

#[cfg(test)]
mod tests {
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
}
