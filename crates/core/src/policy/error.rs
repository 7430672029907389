//! Why a policy was refused: [`PolicyError`], naming its field as the gateway's extension
//! does.

use std::fmt;

use serde_json::Value;

use super::PolicyLimits;

/// What kind of mistake a [`PolicyError`] is (the gateway gives some their own error code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyErrorKind {
    /// A field the policy does not have.
    UnknownField,
    /// `samples` outside `n..=max_samples`.
    Samples,
    /// A `select` that names no rule.
    UnknownRule,
    /// `samples` above `n` (or a `window`) without a `select`.
    NeedsRule,
    /// A field that goes with another rule than the one selected.
    GoesWith,
    /// A `vote_by` that compiles to more than
    /// [`VOTE_PATTERN_SIZE_LIMIT`](crate::defaults::VOTE_PATTERN_SIZE_LIMIT).
    PatternTooLarge,
    /// A value of the wrong type or out of its range.
    Invalid,
}

/// Why a policy was refused: the field ([`field`](Self::field), as its serde form names it:
/// `samples`, `confidence.keep`), what kind of mistake ([`kind`](Self::kind)), and a message
/// naming the field as the gateway's extension does (`"choicewise.samples" must be ...`).
///
/// ```
/// use choicewise_core::{Policy, PolicyErrorKind, PolicyLimits};
/// let e = Policy::from_json(
///     serde_json::json!({"samples": 3, "select": "vote", "hedge_after_ms": 50}).as_object().unwrap(),
///     &PolicyLimits::default(),
/// ).unwrap_err();
/// assert_eq!((e.field(), e.kind()), ("hedge_after_ms", PolicyErrorKind::GoesWith));
/// assert_eq!(e.to_string(), r#""choicewise.hedge_after_ms" goes with "select": "first_token""#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    field: String,
    kind: PolicyErrorKind,
    message: String,
}

impl PolicyError {
    pub(super) fn new(field: &str, kind: PolicyErrorKind, message: String) -> Self {
        PolicyError {
            field: field.to_string(),
            kind,
            message,
        }
    }

    /// `"choicewise.FIELD" PROBLEM`.
    pub(super) fn invalid(field: &str, problem: impl fmt::Display) -> Self {
        PolicyError::new(
            field,
            PolicyErrorKind::Invalid,
            format!("\"choicewise.{field}\" {problem}"),
        )
    }

    pub(super) fn goes_with(field: &str, rule: &str) -> Self {
        PolicyError::new(
            field,
            PolicyErrorKind::GoesWith,
            format!("\"choicewise.{field}\" goes with \"select\": {rule}"),
        )
    }

    /// The field at fault, as the serde form names it (`samples`, `confidence.keep`).
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What kind of mistake it is.
    pub fn kind(&self) -> PolicyErrorKind {
        self.kind
    }

    /// What is wrong, without the field's name where the message starts with it (`must be
    /// at least 10 ..., not 0`): for a program that names the field its own way (a flag).
    ///
    /// ```
    /// use choicewise_core::{PickRule, Policy, PolicyLimits};
    /// let e = Policy::builder().select(PickRule::Vote).min_votes(0).build(&PolicyLimits::default()).unwrap_err();
    /// assert_eq!((e.field(), e.problem()), ("min_votes", "must be an integer of 1 or more, not 0"));
    /// ```
    pub fn problem(&self) -> &str {
        let named = format!("\"choicewise.{}\" ", self.field);
        self.message.strip_prefix(&named).unwrap_or(&self.message)
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PolicyError {}

pub(super) fn samples_error(v: &Value, limits: &PolicyLimits) -> PolicyError {
    let n = limits.n.max(1);
    let range = match limits.max_samples {
        Some(max) => format!("from n ({n}) to {max} (max_samples)"),
        None => format!("of n ({n}) or more"),
    };
    PolicyError::new(
        "samples",
        PolicyErrorKind::Samples,
        format!("\"choicewise.samples\" must be an integer {range}, not {v}"),
    )
}

pub(super) fn window_error(v: &Value) -> PolicyError {
    PolicyError::invalid(
        "window",
        format_args!("must be an integer of 1 or more, not {v}"),
    )
}

pub(super) fn min_votes_error(v: &Value) -> PolicyError {
    PolicyError::invalid(
        "min_votes",
        format_args!("must be an integer of 1 or more, not {v}"),
    )
}

pub(super) fn deadline_error(v: &Value) -> PolicyError {
    PolicyError::invalid(
        "deadline_ms",
        format_args!("must be a whole number of milliseconds, 1 or more, not {v}"),
    )
}

/// The ranges of `confidence`'s options: `(lo, hi)` for the whole ones.
pub(super) const WARMUP: (u64, u64) = (1, 64);
pub(super) const GROUP_TOKENS: (u64, u64) = (1, 100_000);
pub(super) const TOP_LOGPROBS: (u64, u64) = (1, 20);

pub(super) fn whole_error(key: &str, (lo, hi): (u64, u64), v: &Value) -> PolicyError {
    PolicyError::invalid(
        &format!("confidence.{key}"),
        format_args!("must be an integer from {lo} to {hi}, not {v}"),
    )
}

pub(super) fn share_error(key: &str, v: &Value) -> PolicyError {
    PolicyError::invalid(
        &format!("confidence.{key}"),
        format_args!("must be a number above 0 and at most 1, not {v}"),
    )
}
