//! The metrics' label sets, and each as the borrowed key a request counts it by
//! ([`Labels`]).

use std::hash::Hash;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;

/// A label set that can be named by borrowed values ([`Labels::Key`]), so that a lookup
/// makes nothing.
pub(crate) trait Labels: Clone + Hash + Eq + Send + Sync + 'static {
    /// The labels as borrowed values, as a lookup names them.
    type Key<'a>: Hash + Copy;

    /// These labels as a key: hashed the same as the key a lookup gives.
    fn key(&self) -> Self::Key<'_>;

    /// Whether these are the labels `key` names.
    fn is(&self, key: Self::Key<'_>) -> bool;

    /// The labels `key` names, made (the first time they come).
    fn owned(key: Self::Key<'_>) -> Self;
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RequestLabels {
    pub(super) model: String,
    pub(super) status: u16,
    /// The API the client spoke: `chat`, `messages`, `responses`, or empty for another path.
    pub(super) api: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct AnswerLabels {
    pub(super) model: String,
    /// The API the client spoke: `chat`, `messages`, `responses`.
    pub(super) api: &'static str,
    /// How the answer ended: the request's log label (`ended`).
    pub(super) ended: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ChoiceLabels {
    pub(super) model: String,
    pub(super) finish_reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TokenLabels {
    pub(super) model: String,
    pub(super) upstream: String,
    pub(super) kind: &'static str,
    pub(super) source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ModelLabels {
    pub(super) model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TryLabels {
    pub(super) model: String,
    pub(super) upstream: String,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UpstreamLabels {
    pub(super) upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct FallbackLabels {
    pub(super) model: String,
    pub(super) to: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KeyLabels {
    /// A `[[auth.keys]]` name, `(unnamed)` for a key of `keys_env`, empty without `[auth]`:
    /// the configuration's, shared.
    pub(super) key: Arc<str>,
    pub(super) status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KeyTokenLabels {
    pub(super) key: Arc<str>,
    pub(super) kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LimitLabels {
    /// `key:team-a`, `tag:batch`, `model:small`.
    pub(super) scope: String,
    /// `requests_per_minute`.
    pub(super) limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StateLabels {
    /// `reserve`, `settle` or `probe` (at start).
    pub(super) op: &'static str,
}

/// A label's value as a lookup names it (a `String` or an `Arc<str>` as `&str`, a number or
/// a constant string as itself), and made from that the first time it comes.
pub(super) trait Field {
    type Key<'a>: Hash + Copy + PartialEq
    where
        Self: 'a;
    fn key(&self) -> Self::Key<'_>;
    fn owned(key: Self::Key<'_>) -> Self;
}

impl Field for String {
    type Key<'a> = &'a str;
    fn key(&self) -> &str {
        self
    }
    fn owned(key: &str) -> Self {
        key.to_string()
    }
}

impl Field for Arc<str> {
    type Key<'a> = &'a str;
    fn key(&self) -> &str {
        self
    }
    fn owned(key: &str) -> Self {
        Arc::from(key)
    }
}

impl Field for &'static str {
    type Key<'a> = &'static str;
    fn key(&self) -> &'static str {
        self
    }
    fn owned(key: &'static str) -> Self {
        key
    }
}

impl Field for u16 {
    type Key<'a> = u16;
    fn key(&self) -> u16 {
        *self
    }
    fn owned(key: u16) -> Self {
        key
    }
}

/// A label set's [`Labels`]: its key is the tuple of its fields' keys, in the order given.
macro_rules! keyed {
    ($labels:ident { $($field:ident: $kind:ty),* $(,)? }) => {
        impl Labels for $labels {
            type Key<'a> = ($(<$kind as Field>::Key<'a>,)*);

            fn key(&self) -> Self::Key<'_> {
                ($(self.$field.key(),)*)
            }

            fn is(&self, key: Self::Key<'_>) -> bool {
                self.key() == key
            }

            fn owned(($($field,)*): Self::Key<'_>) -> Self {
                $labels { $($field: Field::owned($field),)* }
            }
        }
    };
}

keyed!(RequestLabels { model: String, status: u16, api: &'static str });
keyed!(AnswerLabels { model: String, api: &'static str, ended: &'static str });
keyed!(ChoiceLabels { model: String, finish_reason: &'static str });
keyed!(TokenLabels { model: String, upstream: String, kind: &'static str, source: &'static str });
keyed!(ModelLabels { model: String });
keyed!(TryLabels { model: String, upstream: String, outcome: &'static str });
keyed!(KeyLabels { key: Arc<str>, status: u16 });
keyed!(KeyTokenLabels { key: Arc<str>, kind: &'static str });
