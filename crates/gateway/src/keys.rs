//! The keys a gateway accepts (`[auth] keys_env`, `[[auth.keys]]`) and who sent a request
//! ([`Caller`]): every key compared in full, in time that does not depend on which matches;
//! a named key known by its SHA-256 only. Read by the `auth` layer, the handler, the limits
//! and the record; it uses none of them.

use std::borrow::Cow;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, Uri, header};

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
/// extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A gateway without `[auth]`: no key.
    Open,
    /// One of the unnamed keys of `keys_env`.
    Unnamed,
    /// The `[[auth.keys]]` of this index.
    Named(usize),
}

/// A key of `[[auth.keys]]`, as the gateway holds it: its name, its digest (never the key),
/// the models it may use and its tags.
#[derive(Clone)]
pub(crate) struct NamedKey {
    pub name: Arc<str>,
    digest: [u8; 32],
    /// None: every model.
    pub models: Option<Vec<String>>,
    pub tags: Vec<String>,
}

impl NamedKey {
    /// A key named `name`, known by the SHA-256 `digest` of the key.
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
        }
    }

    /// The SHA-256 of its key.
    pub(crate) fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// Whether it may use `model`.
    pub(crate) fn allows(&self, model: &str) -> bool {
        (self.models.as_ref()).is_none_or(|models| models.iter().any(|m| m == model))
    }
}

impl std::fmt::Debug for NamedKey {
    /// Its name and models: never its digest.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedKey")
            .field("name", &self.name)
            .field("models", &self.models)
            .field("tags", &self.tags)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Keys {
    /// How many unnamed keys, and the named ones' names: never a key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("unnamed", &self.unnamed.len())
            .field("named", &self.named)
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

/// The keys a gateway accepts: unnamed ones (`keys_env`) and named ones (`[[auth.keys]]`).
/// None at all: no key needed.
#[derive(Clone, Default)]
pub(crate) struct Keys {
    unnamed: Vec<String>,
    named: Vec<NamedKey>,
}

impl Keys {
    /// Whether `caller`'s key may use the model `name`: an open or unnamed caller, and a key
    /// without `models`, may use every one.
    pub(crate) fn may_use(&self, caller: Caller, name: &str) -> bool {
        match caller {
            Caller::Named(i) => self.named(i).allows(name),
            _ => true,
        }
    }

    /// Whether `caller`'s key may use the model `name` ([`may_use`](Self::may_use)): the 403 `model_not_allowed` that says it may not, naming the key and its
    /// models.
    pub(crate) fn allows(&self, caller: Caller, name: &str) -> Result<(), ApiError> {
        if self.may_use(caller, name) {
            return Ok(());
        }
        let Caller::Named(i) = caller else {
            return Ok(());
        };
        let key = self.named(i);
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            format!(
                "the key `{}` may not use the model {name:?} (its models: {})",
                key.name,
                key.models.as_deref().unwrap_or_default().join(", ")
            ),
        )
        .code("model_not_allowed"))
    }

    pub(crate) fn new(unnamed: Vec<String>, named: Vec<NamedKey>) -> Keys {
        Keys { unnamed, named }
    }

    /// No key is configured: the gateway is open (on loopback).
    pub(crate) fn is_empty(&self) -> bool {
        self.unnamed.is_empty() && self.named.is_empty()
    }

    /// How many keys there are.
    pub(crate) fn len(&self) -> usize {
        self.unnamed.len() + self.named.len()
    }

    /// The named key of this index.
    pub(crate) fn named(&self, index: usize) -> &NamedKey {
        &self.named[index]
    }

    /// The named keys, in the configuration's order.
    pub(crate) fn all_named(&self) -> &[NamedKey] {
        &self.named
    }

    /// The name of a caller's key, shared (never copied): its `[[auth.keys]]` name or
    /// [`UNNAMED`]; none without `[auth]`.
    pub(crate) fn name(&self, caller: Caller) -> Option<Arc<str>> {
        static UNNAMED_NAME: std::sync::LazyLock<Arc<str>> =
            std::sync::LazyLock::new(|| Arc::from(UNNAMED));
        match caller {
            Caller::Open => None,
            Caller::Unnamed => Some(UNNAMED_NAME.clone()),
            Caller::Named(i) => self.named.get(i).map(|k| k.name.clone()),
        }
    }

    /// The `key` label of a caller: its name, [`UNNAMED`], or empty without `[auth]`.
    pub(crate) fn label(&self, caller: Caller) -> &str {
        match caller {
            Caller::Open => "",
            Caller::Unnamed => UNNAMED,
            Caller::Named(i) => &self.named[i].name,
        }
    }

    /// Checks the client's key ([`given_key`]: `Authorization: Bearer KEY`, Anthropic's
    /// `x-api-key`, Google's `x-goog-api-key` or `?key=`) when keys are configured: who sent it, or a 401. Every key is compared in full,
    /// whichever matches (an unnamed key as it is, a named key by its digest): no early exit
    /// to time.
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
            let digest = match self.named.is_empty() {
                true => [0u8; 32],
                false => sha256(given.as_bytes()),
            };
            let named = (self.named.iter().enumerate()).fold(None, |found, (i, key)| {
                match same(&key.digest, &digest) {
                    true => Some(i),
                    false => found,
                }
            });
            match (named, unnamed) {
                (Some(i), _) => Some(Caller::Named(i)),
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

/// Compares two byte strings in time that depends on their lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
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

    #[test]
    fn a_key_is_known_by_its_name_or_as_unnamed() {
        let keys = Keys::new(
            vec!["sk-old".into()],
            vec![
                NamedKey::new(
                    "team-a",
                    sha256(b"sk-a"),
                    Some(vec!["small".into()]),
                    vec![],
                ),
                NamedKey::new("team-b", sha256(b"sk-b"), None, vec![]),
            ],
        );
        assert_eq!(
            keys.authorize(&bearer("sk-a"), &root()),
            Ok(Caller::Named(0))
        );
        assert_eq!(
            keys.authorize(&bearer("sk-b"), &root()),
            Ok(Caller::Named(1))
        );
        assert_eq!(
            keys.authorize(&bearer("sk-old"), &root()),
            Ok(Caller::Unnamed)
        );
        let mut anthropic = HeaderMap::new();
        anthropic.insert("x-api-key", "sk-b".parse().unwrap());
        assert_eq!(keys.authorize(&anthropic, &root()), Ok(Caller::Named(1)));
        let e = keys.authorize(&bearer("sk-c"), &root()).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("invalid_api_key"));
        assert!(!e.message.contains("sk-c"));
        let e = keys.authorize(&HeaderMap::new(), &root()).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("missing_api_key"));
        assert_eq!(keys.label(Caller::Named(0)), "team-a");
        assert_eq!(keys.label(Caller::Unnamed), UNNAMED);
        assert!(keys.named(0).allows("small") && !keys.named(0).allows("large"));
        assert!(keys.named(1).allows("large"));
        let shown = format!("{keys:?}");
        assert!(
            !shown.contains("sk-old") && shown.contains("team-a"),
            "{shown}"
        );
        // Without keys, every request is the open gateway's.
        assert_eq!(
            Keys::default().authorize(&HeaderMap::new(), &root()),
            Ok(Caller::Open)
        );
    }

    #[test]
    fn googles_key_header_and_query_key_are_keys() {
        let keys = Keys::new(vec!["sk-a b/c".into()], vec![]);
        let mut goog = HeaderMap::new();
        goog.insert("x-goog-api-key", "sk-a b/c".parse().unwrap());
        assert_eq!(keys.authorize(&goog, &root()), Ok(Caller::Unnamed));
        let path = "/v1beta/models/m:streamGenerateContent";
        for query in ["?alt=sse&key=sk-a+b%2Fc", "?key=sk-a%20b/c&alt=sse"]
            .iter()
            .filter_map(|q| format!("{path}{q}").parse::<Uri>().ok())
        {
            assert_eq!(
                keys.authorize(&HeaderMap::new(), &query),
                Ok(Caller::Unnamed),
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
