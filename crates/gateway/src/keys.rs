//! The keys a gateway accepts (`[auth] keys_env`, `[[auth.keys]]`) and who sent a request
//! ([`Caller`]): every key compared in full, in time that does not depend on which matches;
//! a named key known by its SHA-256 only, with its limits' rules. Read by the `auth` layer,
//! the handler, the limits and the record; it uses none of them.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, Uri, header};

use crate::config::RateLimits;
use crate::counter::Rule;
use crate::error::ApiError;

/// The key a request sends: `Authorization: Bearer KEY`, Anthropic's `x-api-key: KEY`, or
/// Google's `x-goog-api-key: KEY` or `?key=KEY` (percent-decoded), the first of these that
/// is there.
pub(crate) fn given_key<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Option<Cow<'a, str>> {
    const X_API_KEY: header::HeaderName = header::HeaderName::from_static("x-api-key");
    const X_GOOG_API_KEY: header::HeaderName = header::HeaderName::from_static("x-goog-api-key");
    let bearer = (headers.get(header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let named = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let query = || {
        (uri.query()?.split('&'))
            .find_map(|pair| pair.strip_prefix("key="))
            .map(percent_decoded)
    };
    (bearer
        .or_else(|| named(X_API_KEY))
        .or_else(|| named(X_GOOG_API_KEY)))
    .map(|key| Cow::Borrowed(key.trim()))
    .or_else(query)
}

/// A query value percent-decoded (`+` is a space); a `%` not followed by two hex digits is
/// kept as it is, and bytes that are not UTF-8 are replaced.
fn percent_decoded(value: &str) -> Cow<'_, str> {
    if !value.contains(['%', '+']) {
        return Cow::Borrowed(value);
    }
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' => {
                let digit = |at: usize| bytes.get(at).and_then(|b| hex(*b));
                match (digit(i + 1), digit(i + 2)) {
                    (Some(high), Some(low)) => {
                        out.push((high * 16 + low) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// The metrics' and log lines' `key` of the unnamed keys (`[auth] keys_env`); no
/// `[[auth.keys]]` may take it as its name.
pub(crate) const UNNAMED: &str = "(unnamed)";

/// Who sent a request, by its key: found by the `auth` layer, kept in the request's
/// extensions. A named key is held as it was when the request arrived: keys changed while it
/// is served (the admin API, a reload) change the requests that come after.
#[derive(Debug, Clone, Default)]
pub(crate) enum Caller {
    /// A gateway without `[auth]`: no key.
    #[default]
    Open,
    /// One of the unnamed keys of `keys_env`.
    Unnamed,
    /// A named key (`[[auth.keys]]`, or made over the admin API).
    Named(Arc<NamedKey>),
}

impl Caller {
    /// Whether this caller may use the model `name`: an open or unnamed caller, and a key
    /// without `models`, may use every one.
    pub(crate) fn may_use(&self, name: &str) -> bool {
        match self {
            Caller::Named(key) => key.allows(name),
            _ => true,
        }
    }

    /// Whether this caller may use the model `name` ([`may_use`](Self::may_use)): the 403
    /// `model_not_allowed` that says it may not, naming the key and its models.
    pub(crate) fn allows(&self, name: &str) -> Result<(), ApiError> {
        match self {
            Caller::Named(key) if !key.allows(name) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                format!(
                    "the key `{}` may not use the model {name:?} (its models: {})",
                    key.name,
                    key.models.as_deref().unwrap_or_default().join(", ")
                ),
            )
            .code("model_not_allowed")),
            _ => Ok(()),
        }
    }

    /// The name of its key, shared (never copied): its name or [`UNNAMED`]; none without
    /// `[auth]`.
    pub(crate) fn name(&self) -> Option<Arc<str>> {
        static UNNAMED_NAME: std::sync::LazyLock<Arc<str>> =
            std::sync::LazyLock::new(|| Arc::from(UNNAMED));
        match self {
            Caller::Open => None,
            Caller::Unnamed => Some(UNNAMED_NAME.clone()),
            Caller::Named(key) => Some(key.name.clone()),
        }
    }

    /// The `key` label of the caller: its key's name, [`UNNAMED`], or empty without `[auth]`.
    pub(crate) fn label(&self) -> &str {
        match self {
            Caller::Open => "",
            Caller::Unnamed => UNNAMED,
            Caller::Named(key) => &key.name,
        }
    }

    /// The limits its key meets: its own, then its tags'.
    pub(crate) fn rules(&self) -> &[Rule] {
        match self {
            Caller::Named(key) => &key.rules,
            _ => &[],
        }
    }
}

/// Where a named key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `[[auth.keys]]` of the configuration file.
    Config,
    /// The admin API, made at this time (milliseconds since the Unix epoch).
    Managed { created_ms: u64 },
}

/// A named key, as the gateway holds it: its name, its digest (never the key), the models
/// it may use, its tags, its limits and when it expires.
#[derive(Clone)]
pub(crate) struct NamedKey {
    pub name: Arc<str>,
    digest: [u8; 32],
    /// None: every model.
    pub models: Option<Vec<String>>,
    pub tags: Vec<String>,
    /// Its own limits, as configured.
    pub limits: RateLimits,
    /// Its own limits, then its tags', with their counters.
    pub rules: Vec<Rule>,
    /// From when it is refused (milliseconds since the Unix epoch); none: never.
    pub expires_ms: Option<u64>,
    pub origin: Origin,
}

impl NamedKey {
    /// A key of the configuration named `name`, known by the SHA-256 `digest` of the key,
    /// without limits (its rules are given with [`with_rules`](Self::with_rules)).
    pub(crate) fn new(
        name: &str,
        digest: [u8; 32],
        models: Option<Vec<String>>,
        tags: Vec<String>,
    ) -> NamedKey {
        NamedKey {
            name: Arc::from(name),
            digest,
            models,
            tags,
            limits: RateLimits::default(),
            rules: Vec::new(),
            expires_ms: None,
            origin: Origin::Config,
        }
    }

    /// The key with these limits and rules.
    pub(crate) fn with_rules(mut self, limits: RateLimits, rules: Vec<Rule>) -> NamedKey {
        self.limits = limits;
        self.rules = rules;
        self
    }

    /// The SHA-256 of its key.
    pub(crate) fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// Whether it may use `model`.
    pub(crate) fn allows(&self, model: &str) -> bool {
        (self.models.as_ref()).is_none_or(|models| models.iter().any(|m| m == model))
    }

    /// Whether it has expired at `now_ms`.
    pub(crate) fn expired(&self, now_ms: u64) -> bool {
        self.expires_ms.is_some_and(|at| at <= now_ms)
    }
}

impl std::fmt::Debug for NamedKey {
    /// Its name and models: never its digest.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedKey")
            .field("name", &self.name)
            .field("models", &self.models)
            .field("tags", &self.tags)
            .field("expires_ms", &self.expires_ms)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Keys {
    /// How many unnamed keys, and the named ones' names: never a key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("unnamed", &self.unnamed.len())
            .field("named", &self.by_name.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// The keys a gateway accepts at one time: unnamed ones (`keys_env`) and named ones
/// (`[[auth.keys]]` and the admin API's), found by the SHA-256 of the key sent. Without
/// `[auth]`, no key is needed. Made whole and swapped in at once
/// ([`crate::keyring::KeyRing`]); never changed in place.
#[derive(Clone, Default)]
pub(crate) struct Keys {
    /// `[auth]` is configured: every request needs a key.
    keyed: bool,
    unnamed: Vec<String>,
    by_digest: HashMap<[u8; 32], Arc<NamedKey>, ByDigest>,
    by_name: BTreeMap<Arc<str>, Arc<NamedKey>>,
}

impl Keys {
    /// The keys of a gateway that asks for them (`keyed`: `[auth]` is configured). The
    /// caller keeps names and digests unique.
    pub(crate) fn new(keyed: bool, unnamed: Vec<String>, named: Vec<NamedKey>) -> Keys {
        let named: Vec<Arc<NamedKey>> = named.into_iter().map(Arc::new).collect();
        Keys {
            keyed: keyed || !unnamed.is_empty() || !named.is_empty(),
            unnamed,
            by_digest: (named.iter()).map(|k| (k.digest, k.clone())).collect(),
            by_name: (named.iter())
                .map(|k| (k.name.clone(), k.clone()))
                .collect(),
        }
    }

    /// No key is asked for: the gateway is open (on loopback).
    pub(crate) fn is_empty(&self) -> bool {
        !self.keyed
    }

    /// How many keys there are.
    pub(crate) fn len(&self) -> usize {
        self.unnamed.len() + self.by_name.len()
    }

    /// The named key of this name.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<NamedKey>> {
        self.by_name.get(name)
    }

    /// The named keys, by name.
    pub(crate) fn all_named(&self) -> impl Iterator<Item = &Arc<NamedKey>> {
        self.by_name.values()
    }

    /// Checks the client's key ([`given_key`]: `Authorization: Bearer KEY`, Anthropic's
    /// `x-api-key`, Google's `x-goog-api-key` or `?key=`) when keys are asked for: who sent
    /// it, or a 401. Every unnamed key is compared in full, whichever matches; a named key
    /// is found by the SHA-256 of the key sent (what a lookup's time may tell is of the
    /// digest, never of the key). A key past its expiry is refused as one the gateway does
    /// not accept.
    pub(crate) fn authorize(&self, headers: &HeaderMap, uri: &Uri) -> Result<Caller, ApiError> {
        if self.is_empty() {
            return Ok(Caller::Open);
        }
        let given = given_key(headers, uri);
        let found = given.as_deref().and_then(|given| {
            let unnamed = (self.unnamed.iter()).fold(false, |found, key| {
                found | same(key.as_bytes(), given.as_bytes())
            });
            // Hashed only where named keys are configured.
            let named = match self.by_digest.is_empty() {
                true => None,
                false => self.by_digest.get(&sha256(given.as_bytes())),
            };
            match (named, unnamed) {
                (Some(key), _) if key.expires_ms.is_some() && key.expired(now_ms()) => None,
                (Some(key), _) => Some(Caller::Named(key.clone())),
                (None, true) => Some(Caller::Unnamed),
                (None, false) => None,
            }
        });
        match (given, found) {
            (_, Some(caller)) => Ok(caller),
            (None, _) => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "no API key: send Authorization: Bearer KEY (or x-api-key: KEY, x-goog-api-key: KEY)",
            )
            .code("missing_api_key")),
            (Some(_), None) => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "the API key is not one this gateway accepts",
            )
            .code("invalid_api_key")),
        }
    }
}

/// Hashes a SHA-256 digest by its first eight bytes: a digest is uniform already, and a
/// key's lookup hashes no more than that.
#[derive(Clone, Copy, Default)]
pub(crate) struct ByDigest;

impl std::hash::BuildHasher for ByDigest {
    type Hasher = DigestHasher;
    fn build_hasher(&self) -> DigestHasher {
        DigestHasher(0)
    }
}

/// The hasher of [`ByDigest`].
pub(crate) struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // An array is hashed as its bytes (no length prefix): the first eight are the hash.
        for &b in bytes.iter().take(8) {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
}

/// Milliseconds since the Unix epoch now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The operator's key (`[admin] key_env`), as the gateway holds it: its digest.
#[derive(Debug, Clone)]
pub(crate) struct Operator {
    digest: [u8; 32],
}

impl Operator {
    /// The operator whose key is `key`.
    pub(crate) fn new(key: &str) -> Operator {
        Operator {
            digest: sha256(key.as_bytes()),
        }
    }

    /// Whether the request sends the operator's key (`Authorization: Bearer`, or as a
    /// client's key is sent): a 401 naming what is missing otherwise, compared by digest in
    /// time that does not depend on where it differs.
    pub(crate) fn check(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), ApiError> {
        let unauthorized = |code: &str, message: &str| {
            Err(
                ApiError::new(StatusCode::UNAUTHORIZED, "invalid_request_error", message)
                    .code(code),
            )
        };
        match given_key(headers, uri) {
            None => unauthorized(
                "missing_api_key",
                "this route is the operator's: send Authorization: Bearer the key of [admin] key_env",
            ),
            Some(given) if same(&sha256(given.as_bytes()), &self.digest) => Ok(()),
            Some(_) => unauthorized("invalid_api_key", "the key is not the operator's"),
        }
    }
}

impl Operator {
    /// Whether `key` is the operator's (compared by digest, in constant time).
    pub(crate) fn is_key(&self, key: &str) -> bool {
        same(&sha256(key.as_bytes()), &self.digest)
    }

    /// The console's session, as its cookie holds it: a digest of the operator's key (never
    /// the key), the same on every replica, void once the key changes.
    pub(crate) fn session(&self) -> String {
        let mut text = b"choicewise console session\n".to_vec();
        text.extend_from_slice(&self.digest);
        sha256(&text).iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `value` is the console's session ([`session`](Self::session)).
    pub(crate) fn is_session(&self, value: &str) -> bool {
        same(value.as_bytes(), self.session().as_bytes())
    }
}

/// Compares two byte strings in time that depends on their lengths only.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(key: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let value = format!("Bearer {key}").parse().unwrap();
        headers.insert(header::AUTHORIZATION, value);
        headers
    }

    fn root() -> Uri {
        Uri::from_static("/")
    }

    /// The name of the key a request was found to send.
    fn who(keys: &Keys, headers: &HeaderMap) -> Result<String, Option<String>> {
        match keys.authorize(headers, &root()) {
            Ok(caller) => Ok(caller.label().to_string()),
            Err(e) => Err(e.code),
        }
    }

    #[test]
    fn a_key_is_known_by_its_name_or_as_unnamed() {
        let mut expired = NamedKey::new("gone", sha256(b"sk-gone"), None, vec![]);
        expired.expires_ms = Some(now_ms() - 1);
        let mut later = NamedKey::new("later", sha256(b"sk-later"), None, vec![]);
        later.expires_ms = Some(now_ms() + 60_000);
        let keys = Keys::new(
            true,
            vec!["sk-old".into()],
            vec![
                NamedKey::new(
                    "team-a",
                    sha256(b"sk-a"),
                    Some(vec!["small".into()]),
                    vec![],
                ),
                NamedKey::new("team-b", sha256(b"sk-b"), None, vec![]),
                expired,
                later,
            ],
        );
        assert_eq!(who(&keys, &bearer("sk-a")), Ok("team-a".into()));
        assert_eq!(who(&keys, &bearer("sk-b")), Ok("team-b".into()));
        assert_eq!(who(&keys, &bearer("sk-old")), Ok(UNNAMED.into()));
        assert_eq!(who(&keys, &bearer("sk-later")), Ok("later".into()));
        // From its expiry on, a key is one the gateway does not accept.
        assert_eq!(
            who(&keys, &bearer("sk-gone")),
            Err(Some("invalid_api_key".into()))
        );
        let mut anthropic = HeaderMap::new();
        anthropic.insert("x-api-key", "sk-b".parse().unwrap());
        assert_eq!(who(&keys, &anthropic), Ok("team-b".into()));
        let e = keys.authorize(&bearer("sk-c"), &root()).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("invalid_api_key"));
        assert!(!e.message.contains("sk-c"));
        let e = keys.authorize(&HeaderMap::new(), &root()).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("missing_api_key"));
        let a = Caller::Named(keys.get("team-a").unwrap().clone());
        assert!(a.may_use("small") && !a.may_use("large"));
        assert_eq!(
            a.allows("large").unwrap_err().code.as_deref(),
            Some("model_not_allowed")
        );
        assert!(Caller::Named(keys.get("team-b").unwrap().clone()).may_use("large"));
        let shown = format!("{keys:?}");
        assert!(
            !shown.contains("sk-old") && shown.contains("team-a"),
            "{shown}"
        );
        // Without keys, every request is the open gateway's; with `[auth]` and no key
        // yet (keys to be made over the admin API), none is.
        assert_eq!(who(&Keys::default(), &HeaderMap::new()), Ok(String::new()));
        let none_yet = Keys::new(true, vec![], vec![]);
        assert_eq!(
            who(&none_yet, &bearer("sk-a")),
            Err(Some("invalid_api_key".into()))
        );
    }

    #[test]
    fn googles_key_header_and_query_key_are_keys() {
        let keys = Keys::new(true, vec!["sk-a b/c".into()], vec![]);
        let mut goog = HeaderMap::new();
        goog.insert("x-goog-api-key", "sk-a b/c".parse().unwrap());
        assert_eq!(who(&keys, &goog), Ok(UNNAMED.into()));
        let path = "/v1beta/models/m:streamGenerateContent";
        for query in ["?alt=sse&key=sk-a+b%2Fc", "?key=sk-a%20b/c&alt=sse"]
            .iter()
            .filter_map(|q| format!("{path}{q}").parse::<Uri>().ok())
        {
            let caller = keys.authorize(&HeaderMap::new(), &query);
            assert_eq!(
                caller.map(|c| c.label().to_string()),
                Ok(UNNAMED.into()),
                "{query}"
            );
        }
        let wrong: Uri = format!("{path}?key=sk-a%2").parse().unwrap();
        let e = keys.authorize(&HeaderMap::new(), &wrong).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("invalid_api_key"));
        // A header's key comes first; a bad escape is kept as it is.
        let both: Uri = format!("{path}?key=other").parse().unwrap();
        assert_eq!(given_key(&goog, &both).as_deref(), Some("sk-a b/c"));
        assert_eq!(percent_decoded("a%zz%4"), "a%zz%4");
        assert_eq!(percent_decoded("%E2%9C%93"), "\u{2713}");
        // A key-like parameter of another name is none.
        let other: Uri = format!("{path}?apikey=sk-a").parse().unwrap();
        assert_eq!(given_key(&HeaderMap::new(), &other), None);
    }
}
