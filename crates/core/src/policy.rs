//! A pick stated as data: [`Policy`], the one description of how a completion's choices are
//! picked that every front end parses into (the gateway's `choicewise` extension and its
//! per-model defaults, the CLI's flags, Python's arguments), checked in one place
//! ([`PolicyBuilder::build`], [`Policy::from_json`]), run by
//! [`Completions::pick`](crate::Completions::pick) and mapped to a request plan by
//! [`Policy::opening`].
//!
//! Its serde form is the gateway's `choicewise` extension, field for field: `samples`,
//! `select` (`"first_token"`, `"first_finished"` or `"vote"`; absent: every sample is a
//! choice), `hedge_after_ms`, `vote_by`, `vote_normalize`, `min_votes`, `window`,
//! `confidence` (`measure`, `warmup`, `keep`, `group_tokens`, `top_logprobs`, `consensus`) and
//! `deadline_ms`. Errors name each field by its own name (`"samples"`); a front end names it
//! its own way ([`PolicyError::message_naming`]: the gateway's `"choicewise.samples"`, the
//! CLI's flags, Python's arguments).
//!
//! The crate root re-exports [`Policy`], [`PolicyBuilder`], [`PickRule`], [`PolicyError`]
//! and [`PolicyErrorKind`]; [`PolicyLimits`], what a policy is checked against, is named
//! here.

mod error;
mod json;

use std::time::Duration;

use choicewise_proto::Confidence;
use serde_json::json;

use error::{
    GROUP_TOKENS, Message, TOP_LOGPROBS, WARMUP, deadline_error, min_votes_error, samples_error,
    share_error, whole_error, window_error,
};
pub use error::{PolicyError, PolicyErrorKind};

use crate::plan::{Opening, Plan, PlanUpstream};
use crate::select::{Pick, VoteKey};

/// The votes a key needs to win unless a policy says otherwise (`min_votes`): one vote out
/// of several is no majority.
///
/// ```
/// assert_eq!(choicewise_core::defaults::DEFAULT_MIN_VOTES, 2);
/// ```
pub const DEFAULT_MIN_VOTES: usize = 2;

/// The shortest hedge a policy takes (`hedge_after_ms`): a shorter one would start every
/// sample at once, which is no hedge.
///
/// ```
/// assert_eq!(choicewise_core::defaults::HEDGE_AFTER_FLOOR.as_millis(), 10);
/// ```
pub const HEDGE_AFTER_FLOOR: Duration = Duration::from_millis(10);

/// The rules, as a policy's errors list them.
const RULES: &str = "first_token, first_finished or vote";

/// How a policy picks among the samples (its `select`).
///
/// ```
/// use choicewise_core::PickRule;
/// assert_eq!(PickRule::FirstToken.as_str(), "first_token");
/// assert_eq!(PickRule::default(), PickRule::All);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PickRule {
    /// Every sample is a choice: nothing is picked or cancelled (no `select`).
    #[default]
    All,
    /// The first samples to produce content or a tool call
    /// ([`Completions::first_token`](crate::Completions::first_token)).
    FirstToken,
    /// The first samples to finish with `stop` or `tool_calls`
    /// ([`Completions::first_finished`](crate::Completions::first_finished)).
    FirstFinished,
    /// A plurality vote over each finished sample's key
    /// ([`Completions::vote`](crate::Completions::vote)).
    Vote,
}

impl PickRule {
    /// Its name: `select`'s value (`"all"` for [`All`](Self::All), which has none).
    pub fn as_str(&self) -> &'static str {
        match self {
            PickRule::All => "all",
            PickRule::FirstToken => "first_token",
            PickRule::FirstFinished => "first_finished",
            PickRule::Vote => "vote",
        }
    }
}

/// What a policy is checked against: `n`, the choices the caller wants (the first-* rules
/// take this many; `samples` is at least `n`), and the most samples allowed.
///
/// ```
/// use choicewise_core::policy::PolicyLimits;
/// let limits = PolicyLimits::new(2).max_samples(16);
/// assert_eq!((limits.n, limits.max_samples), (2, Some(16)));
/// assert_eq!(PolicyLimits::default(), PolicyLimits::new(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyLimits {
    /// The choices wanted (at least 1).
    pub n: u32,
    /// The most samples a policy may ask for (`None`: no limit).
    pub max_samples: Option<u32>,
}

impl Default for PolicyLimits {
    fn default() -> Self {
        PolicyLimits::new(1)
    }
}

impl PolicyLimits {
    /// `n` choices wanted (0 counts as 1), no limit on samples.
    pub fn new(n: u32) -> Self {
        PolicyLimits {
            n: n.max(1),
            max_samples: None,
        }
    }

    /// At most `max` samples (the gateway's `max_samples`).
    pub fn max_samples(mut self, max: u32) -> Self {
        self.max_samples = Some(max);
        self
    }
}

/// A policy as stated, unchecked: one setter per field, then [`build`](Self::build) checks
/// them all against the limits.
///
/// ```
/// use std::time::Duration;
/// use choicewise_core::policy::PolicyLimits;
/// use choicewise_core::{Policy, PickRule};
/// let policy = Policy::builder()
///     .select(PickRule::FirstToken)
///     .samples(3)
///     .hedge_after(Duration::from_millis(250))
///     .build(&PolicyLimits::default())
///     .unwrap();
/// assert_eq!(policy.hedge_after(), Some(Duration::from_millis(250)));
/// let too_soon = Policy::builder().select(PickRule::FirstToken).samples(3)
///     .hedge_after(Duration::ZERO).build(&PolicyLimits::default()).unwrap_err();
/// assert_eq!(too_soon.field(), "hedge_after_ms");
/// ```
#[derive(Debug, Clone, Default)]
pub struct PolicyBuilder {
    samples: Option<u32>,
    select: Option<PickRule>,
    take: Option<usize>,
    hedge_after: Option<Duration>,
    vote_by: Option<String>,
    /// `vote_by` compiled, when it was (a policy checked again keeps it).
    compiled: Option<VoteKey>,
    vote_normalize: bool,
    min_votes: Option<usize>,
    window: Option<usize>,
    confidence: Option<Confidence>,
    deadline: Option<Duration>,
}

impl PolicyBuilder {
    /// Samples to take (default `n`; from `n` to the limits' `max_samples`).
    pub fn samples(mut self, samples: u32) -> Self {
        self.samples = Some(samples);
        self
    }

    /// The rule (default [`PickRule::All`], which needs `samples` = `n`).
    pub fn select(mut self, rule: PickRule) -> Self {
        self.select = Some(rule);
        self
    }

    /// How many the first-* rules select (default `n`); not for a vote, whose selection is
    /// every finished choice whose key won.
    pub fn take(mut self, take: usize) -> Self {
        self.take = Some(take);
        self
    }

    /// Hedging, for `first_token` only: one sample first, one more every `after` while none
    /// produced (at least [`HEDGE_AFTER_FLOOR`]).
    pub fn hedge_after(mut self, after: Duration) -> Self {
        self.hedge_after = Some(after);
        self
    }

    /// A vote's key: the first capture group of this pattern in the content (default: the
    /// trimmed content).
    pub fn vote_by(mut self, pattern: impl Into<String>) -> Self {
        self.vote_by = Some(pattern.into());
        self.compiled = None;
        self
    }

    /// A vote's keys compared case-folded, without trailing punctuation
    /// ([`VoteKey::normalize`]).
    pub fn vote_normalize(mut self, normalize: bool) -> Self {
        self.vote_normalize = normalize;
        self
    }

    /// The votes a key needs to win (default [`DEFAULT_MIN_VOTES`]).
    pub fn min_votes(mut self, votes: usize) -> Self {
        self.min_votes = Some(votes);
        self
    }

    /// A vote window by window, `size` samples at a time ([`Pick::window`](crate::Pick::window)).
    pub fn window(mut self, size: usize) -> Self {
        self.window = Some(size);
        self
    }

    /// A vote guided by confidence ([`Pick::confidence`](crate::Pick::confidence)); each
    /// option is checked: `warmup` 1 to 64, `keep` and `consensus` above 0 and at most 1,
    /// `group_tokens` 1 to 100000, `top_logprobs` 1 to 20.
    pub fn confidence(mut self, options: Confidence) -> Self {
        self.confidence = Some(options);
        self
    }

    /// Gives up waiting after `deadline` ([`Pick::deadline`](crate::Pick::deadline)).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Checks every field and their combinations against `limits`: the one place a policy
    /// is validated. Refused: `samples` outside `n..=max_samples`; `samples` above `n` (or a
    /// `window`) without a rule; `hedge_after` outside `first_token` or below
    /// [`HEDGE_AFTER_FLOOR`]; `window`, `confidence`, `vote_by`, `vote_normalize` or
    /// `min_votes` outside a vote; `take` on a vote or on every sample; a `min_votes` above
    /// the `samples` stated; a `vote_by` that is no regular expression or compiles too large;
    /// values out of their range.
    pub fn build(self, limits: &PolicyLimits) -> Result<Policy, PolicyError> {
        let n = limits.n.max(1);
        if let Some(k) = self.samples
            && (k < n || limits.max_samples.is_some_and(|max| k > max))
        {
            return Err(samples_error(&json!(k), limits));
        }
        let samples = self.samples.unwrap_or(n);
        let key = match (&self.vote_by, &self.compiled) {
            (None, _) => None,
            (Some(_), Some(key)) => Some(key.clone()),
            (Some(pattern), None) => Some(VoteKey::pattern(pattern).map_err(|e| {
                match e.too_large() {
                    // The error says which bound: its length, nesting, case-folded classes
                    // or compiled size.
                    true => PolicyError::new(
                        "vote_by",
                        PolicyErrorKind::PatternTooLarge,
                        Message::field("vote_by").then(format_args!(" is {e}")),
                    ),
                    false => PolicyError::invalid("vote_by", format_args!("is {e}")),
                }
            })?),
        };
        if self.window == Some(0) {
            return Err(window_error(&json!(0)));
        }
        let rule = match self.select {
            Some(rule) => rule,
            None if samples == n && self.window.is_none() => PickRule::All,
            None => {
                return Err(PolicyError::new(
                    "select",
                    PolicyErrorKind::NeedsRule,
                    Message::field("samples")
                        .then(" above n needs ")
                        .then_field("select")
                        .then(format_args!(" ({RULES})")),
                ));
            }
        };
        let vote = rule == PickRule::Vote;
        if let (true, Some(c)) = (vote, &self.confidence) {
            check_confidence(c)?;
        }
        let first = matches!(rule, PickRule::FirstToken | PickRule::FirstFinished);
        let first_token = "\"first_token\"";
        let a_vote = "\"vote\"";
        for (stated, field, with) in [
            (
                self.hedge_after.is_some() && rule != PickRule::FirstToken,
                "hedge_after_ms",
                first_token,
            ),
            (self.window.is_some() && !vote, "window", a_vote),
            (self.confidence.is_some() && !vote, "confidence", a_vote),
            (self.vote_by.is_some() && !vote, "vote_by", a_vote),
            (self.vote_normalize && !vote, "vote_normalize", a_vote),
            (self.min_votes.is_some() && !vote, "min_votes", a_vote),
            (
                self.take.is_some() && !first,
                "take",
                "\"first_token\" or \"first_finished\"",
            ),
        ] {
            if stated {
                return Err(PolicyError::goes_with(field, with));
            }
        }
        if let Some(after) = self.hedge_after
            && after < HEDGE_AFTER_FLOOR
        {
            return Err(PolicyError::invalid(
                "hedge_after_ms",
                format_args!(
                    "must be at least {} (a shorter hedge would start every sample at once), not {}",
                    HEDGE_AFTER_FLOOR.as_millis(),
                    after.as_millis()
                ),
            ));
        }
        if self.take == Some(0) {
            return Err(PolicyError::invalid("take", "must be 1 or more, not 0"));
        }
        if self.min_votes == Some(0) {
            return Err(min_votes_error(&json!(0)));
        }
        let min_votes = self.min_votes.unwrap_or(DEFAULT_MIN_VOTES);
        if let (true, Some(k)) = (vote, self.samples)
            && min_votes > k as usize
        {
            let default = match self.min_votes {
                Some(_) => "",
                None => ", the default",
            };
            return Err(PolicyError::new(
                "min_votes",
                PolicyErrorKind::Invalid,
                Message::field("min_votes")
                    .then(format_args!(" ({min_votes}{default}) is more than "))
                    .then_field("samples")
                    .then(format_args!(" ({k}): no key could win")),
            ));
        }
        if self.deadline == Some(Duration::ZERO) {
            return Err(deadline_error(&json!(0)));
        }
        let compiled = key.clone();
        let key = vote.then(|| {
            key.unwrap_or_else(VoteKey::content)
                .normalize(self.vote_normalize)
        });
        Ok(Policy {
            rule,
            samples,
            take: self.take.unwrap_or(n as usize),
            key,
            stated: PolicyBuilder { compiled, ..self },
        })
    }
}

fn check_confidence(c: &Confidence) -> Result<(), PolicyError> {
    for (key, value, range) in [
        ("warmup", c.warmup, WARMUP),
        ("group_tokens", c.group_tokens, GROUP_TOKENS),
        ("top_logprobs", c.top_logprobs, TOP_LOGPROBS),
    ] {
        if !(range.0..=range.1).contains(&(value as u64)) {
            return Err(whole_error(key, range, &json!(value)));
        }
    }
    for (key, value) in [("keep", c.keep), ("consensus", c.consensus)] {
        if !(value > 0.0 && value <= 1.0) {
            return Err(share_error(key, &json!(value)));
        }
    }
    Ok(())
}

/// A checked pick, stated as data: its rule, `samples`, how many the first-* rules take, a
/// hedge, a vote's key, minimum votes, window and confidence, a deadline. Made by
/// [`Policy::builder`] or [`Policy::from_json`] (or deserialised), which check it; run by
/// [`Completions::pick`](crate::Completions::pick); its request plan's opening is
/// [`opening`](Self::opening).
///
/// ```
/// use choicewise_core::policy::PolicyLimits;
/// use choicewise_core::{PickRule, Policy};
/// use choicewise_core::plan::Opening;
/// let ext = serde_json::json!({"samples": 8, "select": "vote", "vote_by": "Answer: (\\d+)", "window": 4});
/// let policy = Policy::from_json(ext.as_object().unwrap(), &PolicyLimits::new(1).max_samples(16)).unwrap();
/// assert_eq!((policy.rule(), policy.samples(), policy.min_votes()), (PickRule::Vote, 8, 2));
/// assert_eq!(policy.opening(), Opening::First(4));
/// assert_eq!(serde_json::to_value(&policy).unwrap(), ext);
/// ```
#[derive(Debug, Clone)]
pub struct Policy {
    rule: PickRule,
    samples: u32,
    take: usize,
    key: Option<VoteKey>,
    /// As stated: for its serde form, and to check it again against other limits.
    stated: PolicyBuilder,
}

impl Default for Policy {
    /// Every sample a choice, one sample.
    fn default() -> Self {
        Policy {
            rule: PickRule::All,
            samples: 1,
            take: 1,
            key: None,
            stated: PolicyBuilder::default(),
        }
    }
}

impl PartialEq for Policy {
    fn eq(&self, other: &Self) -> bool {
        (self.rule, self.samples, self.take) == (other.rule, other.samples, other.take)
            && self.to_json() == other.to_json()
    }
}

impl Policy {
    /// A policy to state field by field, then [`build`](PolicyBuilder::build).
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }

    /// The same policy checked against other limits (another request's `n`): what depends
    /// on `n` (`samples` at least `n`, `take`) is checked again; its pattern is not compiled
    /// again.
    ///
    /// ```
    /// use choicewise_core::policy::PolicyLimits;
    /// use choicewise_core::Policy;
    /// let ext = serde_json::json!({"samples": 2, "select": "first_token"});
    /// let policy = Policy::from_json(ext.as_object().unwrap(), &PolicyLimits::default()).unwrap();
    /// assert_eq!(policy.checked_for(&PolicyLimits::new(2)).unwrap().take(), 2);
    /// assert_eq!(policy.checked_for(&PolicyLimits::new(3)).unwrap_err().field(), "samples");
    /// ```
    pub fn checked_for(&self, limits: &PolicyLimits) -> Result<Policy, PolicyError> {
        self.stated.clone().build(limits)
    }

    /// Its rule.
    pub fn rule(&self) -> PickRule {
        self.rule
    }

    /// The samples to take (`n` unless stated).
    pub fn samples(&self) -> u32 {
        self.samples
    }

    /// How many the first-* rules select (`n` unless stated); every sample for
    /// [`PickRule::All`].
    pub fn take(&self) -> usize {
        self.take
    }

    /// The hedge of a `first_token` rule.
    pub fn hedge_after(&self) -> Option<Duration> {
        self.stated.hedge_after
    }

    /// A vote's key (`None` for the other rules).
    pub fn vote_key(&self) -> Option<&VoteKey> {
        self.key.as_ref()
    }

    /// The votes a key needs to win ([`DEFAULT_MIN_VOTES`] unless stated).
    pub fn min_votes(&self) -> usize {
        self.stated.min_votes.unwrap_or(DEFAULT_MIN_VOTES)
    }

    /// A vote's window.
    pub fn window(&self) -> Option<usize> {
        self.stated.window
    }

    /// A vote's confidence options.
    pub fn confidence(&self) -> Option<Confidence> {
        self.stated.confidence
    }

    /// The pick's deadline.
    pub fn deadline(&self) -> Option<Duration> {
        self.stated.deadline
    }

    /// When its request plan's requests start: one sample first when hedged, the warmup of a
    /// confidence-guided vote, a vote's first window, else all at once. The one mapping from
    /// a pick to a [`Plan`]'s opening.
    ///
    /// ```
    /// use choicewise_core::policy::PolicyLimits;
    /// use choicewise_core::Policy;
    /// use choicewise_core::plan::Opening;
    /// let read = |v: serde_json::Value| Policy::from_json(v.as_object().unwrap(), &PolicyLimits::default()).unwrap();
    /// assert_eq!(read(serde_json::json!({"samples": 3, "select": "first_token", "hedge_after_ms": 200})).opening(), Opening::Hedged);
    /// assert_eq!(read(serde_json::json!({"samples": 9, "select": "vote", "confidence": {"warmup": 4}})).opening(), Opening::First(4));
    /// assert_eq!(read(serde_json::json!({})).opening(), Opening::All);
    /// ```
    pub fn opening(&self) -> Opening {
        match (
            self.rule,
            self.hedge_after(),
            self.confidence(),
            self.window(),
        ) {
            (PickRule::FirstToken, Some(_), _, _) => Opening::Hedged,
            // DeepConf: the warmup first; the pick starts the rest while it is undecided.
            (PickRule::Vote, _, Some(c), _) => Opening::First(c.warmup),
            (PickRule::Vote, _, None, Some(w)) => Opening::First(w),
            _ => Opening::All,
        }
    }

    /// Its [`samples`](Self::samples) planned over `upstreams`, opened as
    /// [`opening`](Self::opening) says.
    ///
    /// ```
    /// use choicewise_core::policy::PolicyLimits;
    /// use choicewise_core::Policy;
    /// use choicewise_core::plan::PlanUpstream;
    /// let ext = serde_json::json!({"samples": 3, "select": "first_token", "hedge_after_ms": 200});
    /// let policy = Policy::from_json(ext.as_object().unwrap(), &PolicyLimits::default()).unwrap();
    /// let plan = policy.plan(&[PlanUpstream::new(1), PlanUpstream::new(1)]);
    /// assert_eq!((plan.requests().len(), plan.opened_at_start()), (3, 1));
    /// ```
    pub fn plan(&self, upstreams: &[PlanUpstream]) -> Plan {
        Plan::new(self.samples, upstreams, self.opening())
    }
}

impl crate::Completions {
    /// The pick a [`Policy`](crate::Policy) states, with its options (its `take`, hedge,
    /// window, minimum votes, confidence, deadline); further options read as methods
    /// ([`keep_rest`](Pick::keep_rest)). A policy of [`PickRule::All`](crate::PickRule::All)
    /// starts every sample and selects the first [`take`](crate::Policy::take) choices at
    /// once, cancelling nothing.
    ///
    /// ```
    /// use choicewise_core::policy::PolicyLimits;
    /// use choicewise_core::{Completions, Policy, Source};
    /// # #[tokio::main] async fn main() {
    /// let answer = |a: &str| Source::reader(std::io::Cursor::new(format!(
    ///     "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{a}\"}},\"finish_reason\":\"stop\"}}]}}\n\n"))).n(1);
    /// let c = Completions::builder().fan_out([answer("41"), answer("42"), answer("42")]);
    /// let ext = serde_json::json!({"samples": 3, "select": "vote"});
    /// let policy = Policy::from_json(ext.as_object().unwrap(), &PolicyLimits::default()).unwrap();
    /// let selection = c.pick(&policy).await;
    /// // The winning key's voters, in the order they finished.
    /// let mut voters = selection.selected.clone();
    /// voters.sort();
    /// assert_eq!((voters, selection.vote.unwrap().votes), (vec![1, 2], 2));
    /// # }
    /// ```
    pub fn pick(&self, policy: &Policy) -> Pick<'_> {
        let mut pick = match (policy.rule(), policy.vote_key()) {
            (PickRule::FirstToken, _) => self.first_token().take(policy.take()),
            (PickRule::FirstFinished, _) => self.first_finished().take(policy.take()),
            (PickRule::Vote, key) => {
                let key = key.cloned().unwrap_or_default();
                let mut vote = self.vote_on(key).min_votes(policy.min_votes());
                if let Some(size) = policy.window() {
                    vote = vote.window(size);
                }
                if let Some(options) = policy.confidence() {
                    vote = vote.confidence(options);
                }
                vote
            }
            _ => self.all(policy.take()),
        };
        if let Some(after) = policy.hedge_after() {
            pick = pick.hedge_after(after);
        }
        if let Some(deadline) = policy.deadline() {
            pick = pick.deadline(deadline);
        }
        pick
    }
}
