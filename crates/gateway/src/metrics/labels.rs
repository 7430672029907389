//! The metrics' label sets, and each as the borrowed key a request counts it by
//! ([`Labels`](super::series::Labels)).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;

use super::series::Labels;

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

impl Labels for RequestLabels {
    type Key<'a> = (&'a str, u16, &'static str);

    fn key(&self) -> Self::Key<'_> {
        (&self.model, self.status, self.api)
    }

    fn is(&self, key: Self::Key<'_>) -> bool {
        self.key() == key
    }

    fn owned((model, status, api): Self::Key<'_>) -> Self {
        RequestLabels {
            model: model.to_string(),
            status,
            api,
        }
    }
}

impl Labels for AnswerLabels {
    type Key<'a> = (&'a str, &'static str, &'static str);

    fn key(&self) -> Self::Key<'_> {
        (&self.model, self.api, self.ended)
    }

    fn is(&self, key: Self::Key<'_>) -> bool {
        self.key() == key
    }

    fn owned((model, api, ended): Self::Key<'_>) -> Self {
        AnswerLabels {
            model: model.to_string(),
            api,
            ended,
        }
    }
}

impl Labels for ChoiceLabels {
    type Key<'a> = (&'a str, &'static str);

    fn key(&self) -> Self::Key<'_> {
        (&self.model, self.finish_reason)
    }

    fn is(&self, key: Self::Key<'_>) -> bool {
        self.key() == key
    }

    fn owned((model, finish_reason): Self::Key<'_>) -> Self {
        ChoiceLabels {
            model: model.to_string(),
            finish_reason,
        }
    }
}

impl Labels for TokenLabels {
    type Key<'a> = (&'a str, &'a str, &'static str, &'static str);

    fn key(&self) -> Self::Key<'_> {
        (&self.model, &self.upstream, self.kind, self.source)
    }

    fn is(&self, key: Self::Key<'_>) -> bool {
        self.key() == key
    }

    fn owned((model, upstream, kind, source): Self::Key<'_>) -> Self {
        TokenLabels {
            model: model.to_string(),
            upstream: upstream.to_string(),
            kind,
            source,
        }
    }
}

impl Labels for ModelLabels {
    type Key<'a> = &'a str;

    fn key(&self) -> Self::Key<'_> {
        &self.model
    }

    fn is(&self, key: Self::Key<'_>) -> bool {
        self.key() == key
    }

    fn owned(model: Self::Key<'_>) -> Self {
        ModelLabels {
            model: model.to_string(),
        }
    }
}

impl Labels for TryLabels {
    type Key<'a> = (&'a str, &'a str, &'static str);

    fn key(&self) -> Self::Key<'_> {
        (&self.model, &self.upstream, self.outcome)
    }

    fn is(&self, key: Self::Key<'_>) -> bool {
        self.key() == key
    }

    fn owned((model, upstream, outcome): Self::Key<'_>) -> Self {
        TryLabels {
            model: model.to_string(),
            upstream: upstream.to_string(),
            outcome,
        }
    }
}

impl Labels for KeyLabels {
    type Key<'a> = (&'a str, u16);

    fn key(&self) -> Self::Key<'_> {
        (&self.key, self.status)
    }

    fn is(&self, key: Self::Key<'_>) -> bool {
        self.key() == key
    }

    fn owned((key, status): Self::Key<'_>) -> Self {
        KeyLabels {
            key: Arc::from(key),
            status,
        }
    }
}

impl Labels for KeyTokenLabels {
    type Key<'a> = (&'a str, &'static str);

    fn key(&self) -> Self::Key<'_> {
        (&self.key, self.kind)
    }

    fn is(&self, key: Self::Key<'_>) -> bool {
        self.key() == key
    }

    fn owned((key, kind): Self::Key<'_>) -> Self {
        KeyTokenLabels {
            key: Arc::from(key),
            kind,
        }
    }
}
