//! The keys a gateway accepts now ([`KeyRing`]): those of the configuration file (read again
//! on a reload) and those made over the admin API, kept in a store every replica reads
//! ([`store::KeyStore`]: Redis, or the records database). They are held as one snapshot
//! ([`Keys`]), made whole from both and swapped in at once: a request finds its key in the
//! snapshot of its arrival and keeps it, so that a change never touches a request in flight.
//!
//! Every replica reads the store's counter of changes every [`POLL`] and the keys again when
//! it moved: a key made, changed or revoked on one replica is seen by every other within a
//! second; on the replica that made the change, at once.

pub(crate) mod store;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::{Config, ConfigError, RateLimits};
use crate::counter::Slots;
use crate::keys::{self, Keys, NamedKey, Origin};
use store::KeyStore;

/// How often each replica asks the store whether the keys changed.
pub(crate) const POLL: Duration = Duration::from_millis(250);

/// Every how many polls the keys are read whole (every 5 s).
const READ_ALL_EVERY: u64 = 20;

/// A key made over the admin API, as the store keeps it (JSON): its name, the SHA-256 of its
/// secret in hexadecimal (never the secret), its models, tags, limits (named as in
/// `[auth.keys.limits]`) and expiry, and when it was made and last changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ManagedKey {
    pub name: String,
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub limits: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

impl ManagedKey {
    /// Its limits, read as `[auth.keys.limits]` is: an error names the limit.
    pub(crate) fn rate_limits(&self) -> Result<RateLimits, String> {
        serde_json::from_value(Value::Object(self.limits.clone())).map_err(|e| e.to_string())
    }

    /// Its digest, from its hexadecimal SHA-256.
    pub(crate) fn digest(&self) -> Option<[u8; 32]> {
        hex_digest(&self.sha256)
    }
}

/// 32 bytes from 64 hexadecimal digits.
pub(crate) fn hex_digest(hex: &str) -> Option<[u8; 32]> {
    let mut digest = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(digest)
}

/// What the configuration file says of the keys: whether keys are asked for, the unnamed
/// ones, the named ones with their own limits, and the tags' limits.
#[derive(Clone, Default)]
pub(crate) struct FileKeys {
    keyed: bool,
    unnamed: Vec<String>,
    named: Vec<NamedKey>,
    tags: HashMap<String, RateLimits>,
}

impl FileKeys {
    /// The keys of `config`'s `[auth]`, the variables it names read with `env_var`: the
    /// unnamed ones of `keys_env`, and each `[[auth.keys]]` by the SHA-256 of its key (read
    /// from its `key_env`, or given as `sha256`). An error names the table and the
    /// variable, never a key.
    pub(crate) fn of(
        config: &Config,
        env_var: &impl Fn(&str) -> Result<String, ConfigError>,
    ) -> Result<FileKeys, ConfigError> {
        let Some(auth) = &config.auth else {
            return Ok(FileKeys::default());
        };
        let mut unnamed = Vec::new();
        if let Some(var) = &auth.keys_env {
            unnamed = env_var(var)
                .map_err(|e| ConfigError(format!("[auth] keys_env: {e}")))?
                .split(',')
                .map(|k| k.trim().to_string())
                .filter(|k| !k.is_empty())
                .collect();
            if unnamed.is_empty() {
                return Err(ConfigError(format!("[auth] keys_env: {var} holds no key")));
            }
        }
        let mut named: Vec<NamedKey> = Vec::new();
        for (k, key) in auth.keys.iter().enumerate() {
            let at = || format!("[[auth.keys]] {} ({:?})", k + 1, key.name);
            let digest = match (&key.key_env, &key.sha256) {
                (Some(var), _) => {
                    let value = env_var(var).map_err(|e| ConfigError(format!("{}: {e}", at())))?;
                    keys::sha256(value.as_bytes())
                }
                (None, Some(hex)) => hex_digest(hex).ok_or_else(|| {
                    ConfigError(format!("{}: sha256 is not 64 hexadecimal digits", at()))
                })?,
                (None, None) => {
                    return Err(ConfigError(format!("{}: no key_env nor sha256", at())));
                }
            };
            if let Some(same) = named.iter().position(|n| n.digest() == &digest) {
                return Err(ConfigError(format!(
                    "{}: the same key as [[auth.keys]] {}; each key's name is its own",
                    at(),
                    same + 1
                )));
            }
            let mut named_key =
                NamedKey::new(&key.name, digest, key.models.clone(), key.tags.clone());
            named_key.limits = key.limits.clone();
            named.push(named_key);
        }
        let tags = (auth.tags.iter())
            .map(|t| (t.name.clone(), t.limits.clone()))
            .collect();
        Ok(FileKeys {
            keyed: true,
            unnamed,
            named,
            tags,
        })
    }

    /// What changed from `self` to `next`, said in a few words: `keys added: a; keys
    /// removed: b; keys changed: c (limits); tags changed: batch`; empty when nothing did.
    pub(crate) fn changes(&self, next: &FileKeys) -> Vec<String> {
        let by_name = |keys: &FileKeys| -> HashMap<String, NamedKey> {
            (keys.named.iter())
                .map(|k| (k.name.to_string(), k.clone()))
                .collect()
        };
        let (before, after) = (by_name(self), by_name(next));
        let mut said = Vec::new();
        let list = |names: BTreeSet<&String>| {
            names
                .into_iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let added: BTreeSet<_> = after.keys().filter(|n| !before.contains_key(*n)).collect();
        let removed: BTreeSet<_> = before.keys().filter(|n| !after.contains_key(*n)).collect();
        if !added.is_empty() {
            said.push(format!("keys added: {}", list(added)));
        }
        if !removed.is_empty() {
            said.push(format!("keys removed: {}", list(removed)));
        }
        let mut changed = Vec::new();
        let mut names: Vec<_> = after.keys().filter(|n| before.contains_key(*n)).collect();
        names.sort();
        for name in names {
            let (old, new) = (&before[name], &after[name]);
            let mut what = Vec::new();
            if old.digest() != new.digest() {
                what.push("key");
            }
            if old.models != new.models {
                what.push("models");
            }
            if old.tags != new.tags {
                what.push("tags");
            }
            if old.limits != new.limits {
                what.push("limits");
            }
            if !what.is_empty() {
                changed.push(format!("{name} ({})", what.join(", ")));
            }
        }
        if !changed.is_empty() {
            said.push(format!("keys changed: {}", changed.join(", ")));
        }
        let tags: BTreeSet<&String> = (self.tags.keys().chain(next.tags.keys()))
            .filter(|t| self.tags.get(*t) != next.tags.get(*t))
            .collect();
        if !tags.is_empty() {
            said.push(format!("tags changed: {}", list(tags)));
        }
        if self.unnamed != next.unnamed {
            said.push(format!(
                "unnamed keys: {} (were {})",
                next.unnamed.len(),
                self.unnamed.len()
            ));
        }
        if self.keyed != next.keyed {
            said.push(match next.keyed {
                true => "[auth] added: every request needs a key".into(),
                false => "[auth] removed: no key is asked for".into(),
            });
        }
        said
    }

    /// Whether a tag of this name is configured.
    pub(crate) fn has_tag(&self, tag: &str) -> bool {
        self.tags.contains_key(tag)
    }

    /// Whether a key of the file has this name.
    pub(crate) fn has_key(&self, name: &str) -> bool {
        self.named.iter().any(|k| *k.name == *name)
    }
}

/// The keys a gateway accepts now, and where the admin API's live.
pub(crate) struct KeyRing {
    current: ArcSwap<Keys>,
    slots: Arc<Slots>,
    file: Mutex<FileKeys>,
    managed: Mutex<Managed>,
    store: Option<Arc<dyn KeyStore>>,
    /// Whether the store's last read failed (said once when it begins, once when it ends).
    failing: AtomicBool,
}

/// The admin API's keys as last read, and the store's counter of changes then.
#[derive(Default)]
struct Managed {
    version: Option<u64>,
    keys: Vec<ManagedKey>,
}

impl KeyRing {
    /// The keys of `file`, and of `store` once read; counters numbered by `slots`.
    pub(crate) fn new(
        file: FileKeys,
        slots: Arc<Slots>,
        store: Option<Arc<dyn KeyStore>>,
    ) -> KeyRing {
        let ring = KeyRing {
            current: ArcSwap::from_pointee(Keys::default()),
            slots,
            file: Mutex::new(file),
            managed: Mutex::new(Managed::default()),
            store,
            failing: AtomicBool::new(false),
        };
        ring.rebuild();
        ring
    }

    /// The keys now.
    pub(crate) fn load(&self) -> arc_swap::Guard<Arc<Keys>> {
        self.current.load()
    }

    /// The keys now, held.
    pub(crate) fn snapshot(&self) -> Arc<Keys> {
        self.current.load_full()
    }

    /// Where the admin API's keys live; none: they cannot be made here.
    pub(crate) fn store(&self) -> Option<&Arc<dyn KeyStore>> {
        self.store.as_ref()
    }

    /// The file's keys now.
    pub(crate) fn file(&self) -> FileKeys {
        self.file.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The admin API's keys as last read.
    pub(crate) fn managed(&self) -> Vec<ManagedKey> {
        let managed = self.managed.lock().unwrap_or_else(|p| p.into_inner());
        managed.keys.clone()
    }

    /// The file's keys replaced by `file` (a reload): what changed, said in a few words.
    pub(crate) fn replace_file(&self, file: FileKeys) -> Vec<String> {
        let changes = {
            let mut held = self.file.lock().unwrap_or_else(|p| p.into_inner());
            let changes = held.changes(&file);
            *held = file;
            changes
        };
        self.rebuild();
        changes
    }

    /// A new snapshot of the file's keys and the admin API's, swapped in. A key of the
    /// store whose name or key is the file's is left out (and said): the file's wins.
    fn rebuild(&self) {
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let managed = self.managed();
        let tag_rules = |tags: &[String]| {
            (tags.iter())
                .filter_map(|t| file.tags.get(t).map(|limits| (t, limits)))
                .flat_map(|(t, limits)| self.slots.rules("tag", t, limits))
                .collect::<Vec<_>>()
        };
        let mut named = Vec::with_capacity(file.named.len() + managed.len());
        for key in &file.named {
            let mut rules = self.slots.rules("key", &key.name, &key.limits);
            rules.extend(tag_rules(&key.tags));
            named.push(key.clone().with_rules(key.limits.clone(), rules));
        }
        for key in &managed {
            let (Some(digest), Ok(limits)) = (key.digest(), key.rate_limits()) else {
                tracing::warn!(key = %key.name, "a key of the store cannot be read; left out");
                continue;
            };
            let clash = named
                .iter()
                .find(|k: &&NamedKey| *k.name == *key.name || k.digest() == &digest);
            if let Some(clash) = clash {
                tracing::warn!(
                    key = %key.name,
                    "a key of the store has the name or the key of `{}`, of the \
                     configuration file; left out",
                    clash.name
                );
                continue;
            }
            let mut rules = self.slots.rules("key", &key.name, &limits);
            rules.extend(tag_rules(&key.tags));
            let mut made = NamedKey::new(&key.name, digest, key.models.clone(), key.tags.clone())
                .with_rules(limits, rules);
            made.expires_ms = key.expires_at_ms;
            made.origin = Origin::Managed {
                created_ms: key.created_at_ms,
            };
            named.push(made);
        }
        self.current
            .store(Arc::new(Keys::new(file.keyed, file.unnamed.clone(), named)));
    }

    /// Reads the store's keys again when its counter of changes moved (or `always`): the
    /// snapshot is made again when they changed. An error is the store's, said by the
    /// caller.
    pub(crate) async fn refresh(&self, always: bool) -> Result<(), String> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let version = store.version().await?;
        let known = self
            .managed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .version;
        if !always && known == Some(version) {
            return Ok(());
        }
        let mut keys = Vec::new();
        for (name, body) in store.all().await? {
            match serde_json::from_str::<ManagedKey>(&body) {
                Ok(key) if key.name == name => keys.push(key),
                Ok(_) | Err(_) => {
                    tracing::warn!(key = %name, "a key of the store cannot be read; left out");
                }
            }
        }
        {
            let mut managed = self.managed.lock().unwrap_or_else(|p| p.into_inner());
            managed.version = Some(version);
            managed.keys = keys;
        }
        self.rebuild();
        Ok(())
    }

    /// Reads the store every [`POLL`] for as long as the ring lives (the task holds it
    /// weakly), inside the current runtime; nothing without a store or a runtime.
    pub(crate) fn watch(self: &Arc<Self>) {
        if self.store.is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let ring: Weak<KeyRing> = Arc::downgrade(self);
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for n in 0u64.. {
                tick.tick().await;
                let Some(ring) = ring.upgrade() else { return };
                // Every [`READ_ALL_EVERY`] polls the keys are read whole, whatever the counter
                // says: a store started again empty counts its changes from 0 again, and
                // may come back to the number last read.
                let always = n % READ_ALL_EVERY == 0;
                let read = tokio::time::timeout(Duration::from_secs(5), ring.refresh(always)).await;
                let read = read.unwrap_or_else(|_| Err("no answer within 5 s".into()));
                ring.said(read);
            }
        });
    }

    /// A read of the store said in the log: its first failure of a run, and its recovery.
    fn said(&self, read: Result<(), String>) {
        let shown = self.store.as_ref().map_or("", |s| s.shown());
        match read {
            Ok(()) => {
                if self.failing.swap(false, Ordering::AcqRel) {
                    tracing::info!(store = %shown, "the keys' store answers again");
                }
            }
            Err(e) => {
                if !self.failing.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        store = %shown,
                        "the keys' store cannot be read ({e}): the keys last read are kept"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;

    /// A store whose counter of changes never moves, as one started again empty and
    /// changed as many times as before may read.
    struct Stuck(Mutex<Vec<(String, String)>>);

    impl KeyStore for Stuck {
        fn version(&self) -> BoxFuture<'_, Result<u64, String>> {
            Box::pin(async { Ok(1) })
        }
        fn all(&self) -> BoxFuture<'_, Result<Vec<(String, String)>, String>> {
            let all = self.0.lock().unwrap().clone();
            Box::pin(async move { Ok(all) })
        }
        fn create<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<bool, String>> {
            Box::pin(async { Ok(false) })
        }
        fn replace<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<bool, String>> {
            Box::pin(async { Ok(false) })
        }
        fn remove<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, String>> {
            Box::pin(async { Ok(false) })
        }
        fn shown(&self) -> &str {
            "stuck"
        }
    }

    #[tokio::test]
    async fn the_keys_are_read_whole_now_and_then_whatever_the_counter_says() {
        let store = Arc::new(Stuck(Mutex::new(Vec::new())));
        let config = Config::from_toml(
            "[admin]\nkey_env = \"A\"\n[auth]\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
        )
        .unwrap();
        let file = FileKeys::of(&config, &|_: &str| Ok("sk".to_string())).unwrap();
        let ring = Arc::new(KeyRing::new(file, Arc::default(), Some(store.clone())));
        ring.watch();
        tokio::time::sleep(POLL * 2).await;
        assert!(ring.snapshot().get("team-x").is_none());
        let key = ManagedKey {
            name: "team-x".into(),
            sha256: "ab".repeat(32),
            models: None,
            tags: Vec::new(),
            limits: Map::new(),
            expires_at_ms: None,
            created_at_ms: 0,
            updated_at_ms: 0,
        };
        let body = serde_json::to_string(&key).unwrap();
        store.0.lock().unwrap().push(("team-x".into(), body));
        // The counter says nothing changed: not read at the next poll ...
        tokio::time::sleep(POLL * 2).await;
        assert!(ring.snapshot().get("team-x").is_none());
        // ... but within the whole read's period (real time: 5 s).
        tokio::time::sleep(POLL * READ_ALL_EVERY as u32).await;
        assert!(ring.snapshot().get("team-x").is_some());
    }

    #[test]
    fn a_reload_says_what_changed_of_the_keys() {
        let file = |text: &str| {
            let config = Config::from_toml(&format!(
                "[auth]\n{text}\n[[auth.tags]]\nname = \"t\"\n[auth.tags.limits]\nrequests_per_minute = 2\n\
                 [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\""
            ))
            .unwrap();
            FileKeys::of(&config, &|_: &str| Ok("sk".to_string())).unwrap()
        };
        let key = |name: &str, extra: &str| {
            format!(
                "[[auth.keys]]\nname = \"{name}\"\nsha256 = \"{}\"\n{extra}\n",
                name.repeat(64).get(..64).unwrap()
            )
        };
        let a = file(&(key("a", "") + &key("b", "")));
        let b = file(&(key("b", "[auth.keys.limits]\nrequests_per_minute = 5") + &key("c", "")));
        assert_eq!(
            a.changes(&b),
            [
                "keys added: c",
                "keys removed: a",
                "keys changed: b (limits)"
            ]
        );
        assert!(a.changes(&a).is_empty());
    }
}
