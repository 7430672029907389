//! The `x-ratelimit-*` headers of a limited key's answer, as OpenAI names and writes them.

use axum::http::{HeaderName, HeaderValue};

use crate::config::{RateLimit, Resource};
use crate::error::Headers;

/// The headers' names, made once.
const NAMES: [[HeaderName; 3]; 2] = [
    [
        HeaderName::from_static("x-ratelimit-limit-requests"),
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderName::from_static("x-ratelimit-reset-requests"),
    ],
    [
        HeaderName::from_static("x-ratelimit-limit-tokens"),
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderName::from_static("x-ratelimit-reset-tokens"),
    ],
];

/// The `x-ratelimit-*` headers of a limited key's answer, as OpenAI names them: for requests
/// and for tokens, the limit that binds most (the least left) of those the request met, what
/// is left of it after this request's reservation, and when its window resets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RateHeaders {
    requests: Option<RateLeft>,
    tokens: Option<RateLeft>,
}

/// One limit's state: its amount, what is left, the milliseconds until its window resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RateLeft {
    limit: u64,
    remaining: u64,
    reset_ms: u64,
}

impl RateHeaders {
    /// From each limit met, with the amount charged in its window and the milliseconds
    /// until that window ends: for each resource, the limit with the least left.
    pub(super) fn of(limits: impl Iterator<Item = (RateLimit, u64, u64)>) -> RateHeaders {
        let mut headers = RateHeaders::default();
        for (limit, amount, reset_ms) in limits {
            let slot = match limit.resource {
                Resource::Requests => &mut headers.requests,
                Resource::Tokens => &mut headers.tokens,
                Resource::Samples | Resource::Usd => continue,
            };
            let left = RateLeft {
                limit: limit.amount,
                remaining: limit.amount.saturating_sub(amount),
                reset_ms,
            };
            if slot.is_none_or(|s| left.remaining < s.remaining) {
                *slot = Some(left);
            }
        }
        headers
    }

    /// The headers' names and values: `x-ratelimit-limit-requests`,
    /// `x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests` (a duration as OpenAI
    /// writes it: `1s`, `6m0s`, `20ms`), and the same for `-tokens`.
    pub(crate) fn into_pairs(self) -> Headers {
        // The values written into one buffer, each header's value a slice of it: one
        // allocation for all of them rather than one each.
        let mut text = String::with_capacity(64);
        let mut ends = [(0usize, 0usize); 6];
        let mut written = 0;
        for left in [self.requests, self.tokens] {
            let Some(left) = left else { continue };
            for value in [left.limit, left.remaining] {
                let start = text.len();
                text.push_str(itoa::Buffer::new().format(value));
                ends[written] = (start, text.len());
                written += 1;
            }
            let start = text.len();
            duration_into(&mut text, left.reset_ms);
            ends[written] = (start, text.len());
            written += 1;
        }
        let bytes = axum::body::Bytes::from(text);
        let names = [self.requests, self.tokens]
            .into_iter()
            .zip(NAMES)
            .filter(|(left, _)| left.is_some())
            .flat_map(|(_, names)| names);
        let mut pairs = Vec::with_capacity(written);
        for (name, (start, end)) in names.zip(&ends[..written]) {
            // Digits and letters: always a header's value.
            if let Ok(value) = HeaderValue::from_maybe_shared(bytes.slice(*start..*end)) {
                pairs.push((name, value));
            }
        }
        pairs
    }
}

/// A duration as OpenAI's `x-ratelimit-reset-*` headers write it: `20ms` under a second,
/// else whole seconds (rounded up) as `45s`, `6m0s`, `1h2m3s`.
pub(super) fn duration_text(ms: u64) -> String {
    let mut text = String::new();
    duration_into(&mut text, ms);
    text
}

/// [`duration_text`]'s words, written at the end of `text`.
fn duration_into(text: &mut String, ms: u64) {
    let mut number = |n: u64, unit: &str| {
        text.push_str(itoa::Buffer::new().format(n));
        text.push_str(unit);
    };
    if ms < 1_000 {
        return number(ms, "ms");
    }
    let s = ms.div_ceil(1_000);
    let (h, m, s) = (s / 3_600, s % 3_600 / 60, s % 60);
    if h > 0 {
        number(h, "h");
    }
    if h > 0 || m > 0 {
        number(m, "m");
    }
    number(s, "s");
}
