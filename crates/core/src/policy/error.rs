//! Why a policy was refused: [`PolicyError`], naming its fields by their own names; each
//! front end names them its own way where it reports.

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
/// that names every field it mentions by the field's own name (`"samples" must be ...`).
/// Each front end names the fields its own way where it reports:
/// [`message_naming`](Self::message_naming) (the gateway's `"choicewise.samples"`),
/// [`problem_naming`](Self::problem_naming) (the CLI's flags, Python's arguments).
///
/// ```
/// use choicewise_core::policy::PolicyLimits;
/// use choicewise_core::{Policy, PolicyErrorKind};
/// let e = Policy::from_json(
///     serde_json::json!({"samples": 3, "select": "vote", "hedge_after_ms": 50}).as_object().unwrap(),
///     &PolicyLimits::default(),
/// ).unwrap_err();
/// assert_eq!((e.field(), e.kind()), ("hedge_after_ms", PolicyErrorKind::GoesWith));
/// assert_eq!(e.to_string(), r#""hedge_after_ms" goes with "select": "first_token""#);
/// let gateway = e.message_naming(|field| format!("\"choicewise.{field}\""));
/// assert_eq!(gateway, r#""choicewise.hedge_after_ms" goes with "select": "first_token""#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    field: String,
    kind: PolicyErrorKind,
    message: Message,
}

/// A message as parts: text, and the fields it mentions, named only when it is rendered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Message(Vec<Part>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(String),
}

impl Message {
    /// A message that starts by naming `field`.
    pub(super) fn field(field: &str) -> Self {
        Message::default().then_field(field)
    }

    /// A message that starts with `text`.
    pub(super) fn text(text: impl fmt::Display) -> Self {
        Message::default().then(text)
    }

    /// Then `field`, named.
    pub(super) fn then_field(mut self, field: &str) -> Self {
        self.0.push(Part::Field(field.to_string()));
        self
    }

    /// Then `text`.
    pub(super) fn then(mut self, text: impl fmt::Display) -> Self {
        self.0.push(Part::Text(text.to_string()));
        self
    }
}

/// `parts` as text, each field named by `name`.
fn render(parts: &[Part], name: &dyn Fn(&str) -> String) -> String {
    let mut out = String::new();
    for part in parts {
        match part {
            Part::Text(text) => out.push_str(text),
            Part::Field(field) => out.push_str(&name(field)),
        }
    }
    out
}

/// A field as core names it: its own name, quoted.
fn own_name(field: &str) -> String {
    format!("\"{field}\"")
}

impl PolicyError {
    pub(super) fn new(field: &str, kind: PolicyErrorKind, message: Message) -> Self {
        PolicyError {
            field: field.to_string(),
            kind,
            message,
        }
    }

    /// `FIELD PROBLEM`.
    pub(super) fn invalid(field: &str, problem: impl fmt::Display) -> Self {
        PolicyError::new(
            field,
            PolicyErrorKind::Invalid,
            Message::field(field).then(format_args!(" {problem}")),
        )
    }

    pub(super) fn goes_with(field: &str, rule: &str) -> Self {
        PolicyError::new(
            field,
            PolicyErrorKind::GoesWith,
            Message::field(field).then(format_args!(" goes with \"select\": {rule}")),
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

    /// The message with every field it mentions named by `name` (given the field as the
    /// serde form names it): how a front end reports it in its own terms.
    ///
    /// ```
    /// use choicewise_core::policy::PolicyLimits;
    /// use choicewise_core::{PickRule, Policy};
    /// let e = Policy::builder().select(PickRule::Vote).samples(1).build(&PolicyLimits::default()).unwrap_err();
    /// assert_eq!(e.to_string(), r#""min_votes" (2, the default) is more than "samples" (1): no key could win"#);
    /// assert_eq!(
    ///     e.message_naming(|field| format!("\"choicewise.{field}\"")),
    ///     r#""choicewise.min_votes" (2, the default) is more than "choicewise.samples" (1): no key could win"#,
    /// );
    /// ```
    pub fn message_naming(&self, name: impl Fn(&str) -> String) -> String {
        render(&self.message.0, &name)
    }

    /// What is wrong, without the field's name where the message starts with it (`must be
    /// at least 10 ..., not 0`), any other field it mentions named by `name`: for a program
    /// that puts the field's own name first its own way (`--vote-min: ...`).
    ///
    /// ```
    /// use choicewise_core::policy::PolicyLimits;
    /// use choicewise_core::{PickRule, Policy};
    /// let e = Policy::builder().select(PickRule::Vote).samples(1).build(&PolicyLimits::default()).unwrap_err();
    /// let flag = |field: &str| match field { "samples" => "--samples".to_string(), f => f.to_string() };
    /// assert_eq!(e.field(), "min_votes");
    /// assert_eq!(e.problem_naming(flag), "(2, the default) is more than --samples (1): no key could win");
    /// ```
    pub fn problem_naming(&self, name: impl Fn(&str) -> String) -> String {
        let parts = &self.message.0;
        match parts.as_slice() {
            [Part::Field(field), Part::Text(text), rest @ ..] if *field == self.field => {
                let text = text.strip_prefix(' ').unwrap_or(text);
                let mut out = text.to_string();
                out.push_str(&render(rest, &name));
                out
            }
            _ => self.message_naming(name),
        }
    }

    /// What is wrong, without the field's name where the message starts with it, other
    /// fields named by their own names ([`problem_naming`](Self::problem_naming)).
    ///
    /// ```
    /// use choicewise_core::policy::PolicyLimits;
    /// use choicewise_core::{PickRule, Policy};
    /// let e = Policy::builder().select(PickRule::Vote).min_votes(0).build(&PolicyLimits::default()).unwrap_err();
    /// assert_eq!((e.field(), e.problem()), ("min_votes", "must be an integer of 1 or more, not 0".to_string()));
    /// ```
    pub fn problem(&self) -> String {
        self.problem_naming(own_name)
    }
}

impl fmt::Display for PolicyError {
    /// The message, each field named by its own name, quoted (`"samples" must be ...`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message_naming(own_name))
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
        Message::field("samples").then(format_args!(" must be an integer {range}, not {v}")),
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
