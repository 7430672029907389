//! Where the admin API's keys live ([`KeyStore`]): Redis (`[state] redis_url`, the hash
//! `choicewise:api-keys`) or the records database (`[records] url`, the table `api_keys`).
//! Each keeps a key's description as JSON under its name and a counter of changes, raised
//! with each change at once (a script; a transaction), which the replicas read to know when
//! to read the keys again. A change is made only where the key is as the caller last read it
//! ([`KeyStore::replace`] compares): two operators changing one key at once never lose one
//! change silently.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::quota::redis::Redis;

/// Where the admin API's keys live. Every call's error is said in words that never hold a
/// secret (a URL without its password).
pub(crate) trait KeyStore: Send + Sync {
    /// The counter of changes.
    fn version(&self) -> BoxFuture<'_, Result<u64, String>>;
    /// Every key's name and description.
    fn all(&self) -> BoxFuture<'_, Result<Vec<(String, String)>, String>>;
    /// Makes the key `name`: `false` when one of that name exists.
    fn create<'a>(&'a self, name: &'a str, body: &'a str) -> BoxFuture<'a, Result<bool, String>>;
    /// Replaces the key `name` by `body` if it is still `old`: `false` when it is not (or is
    /// gone).
    fn replace<'a>(
        &'a self,
        name: &'a str,
        old: &'a str,
        body: &'a str,
    ) -> BoxFuture<'a, Result<bool, String>>;
    /// Removes the key `name`: `false` when there was none.
    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, String>>;
    /// The store as the log names it.
    fn shown(&self) -> &str;
}

/// The hash of the keys in Redis, and its counter of changes (one hash tag: one slot).
const HASH: &str = "{choicewise:api-keys}";
const VERSION: &str = "{choicewise:api-keys}:version";

/// Each script changes the hash and raises the counter at once, only when it changed.
const CREATE: &str = r"
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('INCR', KEYS[2])
  return 1
end
return 0";
const REPLACE: &str = r"
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  redis.call('INCR', KEYS[2])
  return 1
end
return 0";
const REMOVE: &str = r"
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
  redis.call('INCR', KEYS[2])
  return 1
end
return 0";

/// The keys in Redis, on the limits' connection.
pub(crate) struct RedisKeys {
    redis: Arc<Redis>,
    shown: String,
}

impl RedisKeys {
    pub(crate) fn new(redis: Arc<Redis>, shown: String) -> RedisKeys {
        RedisKeys { redis, shown }
    }

    async fn script(&self, source: &str, args: &[&str]) -> Result<bool, String> {
        let mut connection = self.redis.connection().await.map_err(|e| e.0)?;
        let script = redis::Script::new(source);
        let mut call = script.key(HASH);
        call.key(VERSION);
        for arg in args {
            call.arg(*arg);
        }
        let done: i64 = call
            .invoke_async(&mut connection)
            .await
            .map_err(|e| format!("redis: {e}"))?;
        Ok(done == 1)
    }
}

impl KeyStore for RedisKeys {
    fn version(&self) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            let mut connection = self.redis.connection().await.map_err(|e| e.0)?;
            let version: Option<u64> = redis::cmd("GET")
                .arg(VERSION)
                .query_async(&mut connection)
                .await
                .map_err(|e| format!("redis: {e}"))?;
            Ok(version.unwrap_or(0))
        })
    }

    fn all(&self) -> BoxFuture<'_, Result<Vec<(String, String)>, String>> {
        Box::pin(async move {
            let mut connection = self.redis.connection().await.map_err(|e| e.0)?;
            let mut all: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(HASH)
                .query_async(&mut connection)
                .await
                .map_err(|e| format!("redis: {e}"))?;
            all.sort();
            Ok(all)
        })
    }

    fn create<'a>(&'a self, name: &'a str, body: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move { self.script(CREATE, &[name, body]).await })
    }

    fn replace<'a>(
        &'a self,
        name: &'a str,
        old: &'a str,
        body: &'a str,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move { self.script(REPLACE, &[name, old, body]).await })
    }

    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move { self.script(REMOVE, &[name]).await })
    }

    fn shown(&self) -> &str {
        &self.shown
    }
}

/// The keys in the records database, on a pool of their own, connected on first use (and
/// again after a failure to connect).
pub(crate) struct RecordsKeys(crate::records::Database);

impl RecordsKeys {
    pub(crate) fn new(url: &str) -> RecordsKeys {
        RecordsKeys(crate::records::Database::new(url))
    }

    /// The database, connected.
    async fn store(&self) -> Result<choicewise_records::Store, String> {
        self.0.store().await
    }
}

impl KeyStore for RecordsKeys {
    fn version(&self) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            let store = self.store().await?;
            store.key_version().await.map_err(|e| e.to_string())
        })
    }

    fn all(&self) -> BoxFuture<'_, Result<Vec<(String, String)>, String>> {
        Box::pin(async move {
            let store = self.store().await?;
            store.keys().await.map_err(|e| e.to_string())
        })
    }

    fn create<'a>(&'a self, name: &'a str, body: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let store = self.store().await?;
            store
                .create_key(name, body)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn replace<'a>(
        &'a self,
        name: &'a str,
        old: &'a str,
        body: &'a str,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let store = self.store().await?;
            (store.replace_key_if(name, old, body).await).map_err(|e| e.to_string())
        })
    }

    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let store = self.store().await?;
            store.remove_key(name).await.map_err(|e| e.to_string())
        })
    }

    fn shown(&self) -> &str {
        self.0.shown()
    }
}
