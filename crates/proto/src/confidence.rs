//! Token log-probabilities as typed values, and the arithmetic of confidence-guided sampling
//! (DeepConf: Fu, Wang, Tian, Zhao, "Deep Think with Confidence", arXiv 2508.15260, 2025).
//!
//! Everything here is synchronous and pure: [`TokenLogprob`] reads the `logprobs` a Chat
//! Completions update carries; [`SampleConfidence`] follows one sample's token and group
//! confidence token by token; [`quantile`] and [`Confidence::threshold`] turn the warmup
//! samples' confidences into the threshold; [`Ballot`](crate::Ballot) tallies keys weighted
//! by confidence. `choicewise-core` drives them from the choices' streams
//! (`Pick::confidence`).
//!
//! ```
//! use choicewise_proto::{Ballot, Confidence, SampleConfidence};
//!
//! let options = Confidence::new().group_tokens(2).keep(0.5);
//! // Two warmup samples: token confidences (-mean of the top-k log-probabilities).
//! let mut sure = SampleConfidence::new(options.group_tokens);
//! let mut unsure = SampleConfidence::new(options.group_tokens);
//! for c in [4.0, 4.0, 3.0] { sure.push(c); }
//! for c in [1.0, 0.5, 1.5] { unsure.push(c); }
//! assert_eq!(sure.confidence(), Some(3.5));   // its lowest group: (4 + 3) / 2
//! assert_eq!(unsure.confidence(), Some(0.75)); // (1 + 0.5) / 2
//! // The threshold: the (1 - keep) quantile of the warmup confidences.
//! let s = options.threshold(&[3.5, 0.75]).unwrap();
//! assert_eq!(s, 2.125);
//! // The vote, weighted by each finished sample's confidence.
//! let mut vote = Ballot::new();
//! vote.add("42", 3.5, 0);
//! vote.add("41", 0.75, 1);
//! assert_eq!(vote.leader().map(|l| l.key), Some("42"));
//! ```

use std::collections::VecDeque;

use serde_json::Value;

/// One generated token with its log-probability and the top-k alternatives, as the Chat
/// Completions wire carries them (`logprobs.content[i]`: `token`, `logprob`,
/// `top_logprobs[j].token` / `.logprob`).
///
/// Malformed parts never fail anything: an entry that is not an object is skipped; a token
/// whose `top_logprobs` is missing, not an array, or has an entry without a finite
/// log-probability at most 0 keeps an empty [`top_logprobs`](Self::top_logprobs) (and so
/// counts for no confidence); the raw JSON is still kept in `ChoiceOutput::logprobs` and
/// `ChoiceEvent::Logprobs` ([`Logprobs`](crate::Logprobs), whose
/// [`tokens`](crate::Logprobs::tokens) these are).
///
/// ```
/// use choicewise_proto::TokenLogprob;
/// let update = serde_json::json!({"content": [
///     {"token": "4", "logprob": -0.1, "top_logprobs": [
///         {"token": "4", "logprob": -0.1}, {"token": "5", "logprob": -2.5}]},
/// ]});
/// let tokens = TokenLogprob::parse(&update);
/// assert_eq!(tokens[0].token, "4");
/// assert_eq!(tokens[0].logprob, Some(-0.1));
/// assert_eq!(tokens[0].top_logprobs[1].token, "5");
/// assert!((tokens[0].confidence().unwrap() - 1.3).abs() < 1e-12);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TokenLogprob {
    /// The token, as sent (empty when the provider left it out).
    pub token: String,
    /// The generated token's log-probability, when sent as a number.
    pub logprob: Option<f64>,
    /// The top-k alternatives (the wire's `top_logprobs`), most likely first as sent; empty
    /// when not sent or malformed.
    pub top_logprobs: Vec<TopLogprob>,
}

/// One of a token's top-k alternatives.
///
/// ```
/// use choicewise_proto::TokenLogprob;
/// let update = serde_json::json!({"content": [{"token": "a", "logprob": -0.5,
///     "top_logprobs": [{"token": "a", "logprob": -0.5}]}]});
/// let top = &TokenLogprob::parse(&update)[0].top_logprobs[0];
/// assert_eq!((top.token.as_str(), top.logprob), ("a", -0.5));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TopLogprob {
    /// The alternative token.
    pub token: String,
    /// Its log-probability (finite, at most 0).
    pub logprob: f64,
}

impl TokenLogprob {
    /// A token with its top-k alternatives, for programs and tests that build them.
    ///
    /// ```
    /// use choicewise_proto::TokenLogprob;
    /// let t = TokenLogprob::new("x", Some(-1.0), [("x", -1.0), ("y", -3.0)]);
    /// assert_eq!(t.confidence(), Some(2.0));
    /// ```
    pub fn new<'a>(
        token: &str,
        logprob: Option<f64>,
        top: impl IntoIterator<Item = (&'a str, f64)>,
    ) -> Self {
        TokenLogprob {
            token: token.to_string(),
            logprob,
            top_logprobs: top
                .into_iter()
                .map(|(token, logprob)| TopLogprob {
                    token: token.to_string(),
                    logprob,
                })
                .collect(),
        }
    }

    /// The tokens of one update's `logprobs` value (`{"content": [...]}`), in order. Only
    /// `content` is read (the message's tokens; `refusal` is left out). Anything malformed
    /// is skipped as described on the type; never fails.
    ///
    /// ```
    /// use choicewise_proto::TokenLogprob;
    /// assert!(TokenLogprob::parse(&serde_json::json!(null)).is_empty());
    /// assert!(TokenLogprob::parse(&serde_json::json!({"content": "oops"})).is_empty());
    /// let odd = serde_json::json!({"content": [7, {"token": "b", "top_logprobs": [{"logprob": "x"}]}]});
    /// let tokens = TokenLogprob::parse(&odd);
    /// assert_eq!(tokens.len(), 1);
    /// assert!(tokens[0].top_logprobs.is_empty() && tokens[0].confidence().is_none());
    /// ```
    pub fn parse(logprobs: &Value) -> Vec<TokenLogprob> {
        let Some(Value::Array(content)) = logprobs.get("content") else {
            return Vec::new();
        };
        content.iter().filter_map(Self::parse_one).collect()
    }

    fn parse_one(entry: &Value) -> Option<TokenLogprob> {
        let entry = entry.as_object()?;
        let token = entry.get("token").and_then(Value::as_str).unwrap_or("");
        let logprob = entry.get("logprob").and_then(Value::as_f64);
        let top = match entry.get("top_logprobs") {
            Some(Value::Array(top)) => top
                .iter()
                .map(|t| {
                    let logprob = t.get("logprob")?.as_f64().filter(|l| valid(*l))?;
                    let token = t.get("token").and_then(Value::as_str).unwrap_or("");
                    Some(TopLogprob {
                        token: token.to_string(),
                        logprob,
                    })
                })
                .collect::<Option<Vec<_>>>()
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Some(TokenLogprob {
            token: token.to_string(),
            logprob,
            top_logprobs: top,
        })
    }

    /// The token's confidence, `C = -(1/k) Σ_j log p(j)` over its `k` top log-probabilities
    /// ([`token_confidence`]); `None` without any.
    ///
    /// ```
    /// use choicewise_proto::TokenLogprob;
    /// assert_eq!(TokenLogprob::new("a", Some(-0.5), [("a", -0.5), ("b", -1.5)]).confidence(), Some(1.0));
    /// assert_eq!(TokenLogprob::new("a", Some(-0.5), []).confidence(), None);
    /// ```
    pub fn confidence(&self) -> Option<f64> {
        let top: Vec<f64> = self.top_logprobs.iter().map(|t| t.logprob).collect();
        token_confidence(&top)
    }
}

/// How a token's confidence is measured: one value read by the library's
/// [`Confidence`], the gateway's `confidence` settings (`"measure"`), Python, the CLI and the
/// bench.
///
/// - [`Sampled`](Self::Sampled) (`"sampled"`, the default): the sampled token's own
///   log-probability (the wire's `logprob`, sent with `logprobs: true` alone, no
///   `top_logprobs` needed). A sample's confidence is its lowest window mean (at most 0);
///   its vote weighs `exp` of it (a probability-like number in 0..=1). Within one problem it
///   ranks right samples above wrong ones far better than DeepConf's measure on the sets
///   measured (docs/gateway.md).
/// - [`TopK`](Self::TopK) (`"top_k"`): DeepConf's, `-(1/k) Σ` of the top-k
///   log-probabilities ([`token_confidence`]); asks `top_logprobs`; the vote weighs the
///   confidence itself (at least 0).
///
/// ```
/// use choicewise_proto::{Measure, TokenLogprob};
/// let t = TokenLogprob::new("4", Some(-0.5), [("4", -0.5), ("5", -1.5)]);
/// assert_eq!(Measure::Sampled.of(&t), Some(-0.5));
/// assert_eq!(Measure::TopK.of(&t), Some(1.0));
/// assert_eq!("top_k".parse::<Measure>(), Ok(Measure::TopK));
/// assert_eq!(Measure::default().as_str(), "sampled");
/// assert_eq!(Measure::Sampled.weight(0.0), 1.0);
/// assert_eq!(Measure::TopK.weight(2.5), 2.5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Measure {
    /// The sampled token's log-probability; the vote weighs `exp(confidence)`.
    #[default]
    Sampled,
    /// DeepConf's: minus the mean of the top-k log-probabilities; the vote weighs the
    /// confidence.
    TopK,
}

/// Every measure, in the order errors list them.
pub const MEASURES: &str = "sampled, top_k";

impl Measure {
    /// Its name on the wire: `"sampled"` or `"top_k"`.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Measure::TopK.as_str(), "top_k");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Measure::Sampled => "sampled",
            Measure::TopK => "top_k",
        }
    }

    /// One token's confidence by this measure; `None` when the token lacks what it reads
    /// (a valid `logprob`, or valid `top_logprobs`).
    ///
    /// ```
    /// use choicewise_proto::{Measure, TokenLogprob};
    /// let bare = TokenLogprob::new("a", Some(-0.25), []);
    /// assert_eq!((Measure::Sampled.of(&bare), Measure::TopK.of(&bare)), (Some(-0.25), None));
    /// let odd = TokenLogprob::new("a", Some(0.5), []); // not a log-probability
    /// assert_eq!(Measure::Sampled.of(&odd), None);
    /// ```
    pub fn of(self, token: &TokenLogprob) -> Option<f64> {
        match self {
            Measure::Sampled => token.logprob.filter(|l| valid(*l)),
            Measure::TopK => token.confidence(),
        }
    }

    /// A vote's weight from a sample's confidence: `exp(confidence)` for
    /// [`Sampled`](Self::Sampled) (its confidence is a log-probability's mean), the
    /// confidence itself for [`TopK`](Self::TopK). Never negative; NaN weighs 0.
    ///
    /// ```
    /// use choicewise_proto::Measure;
    /// assert!((Measure::Sampled.weight(-1.0) - (-1.0f64).exp()).abs() < 1e-15);
    /// assert_eq!(Measure::TopK.weight(f64::NAN), 0.0);
    /// ```
    pub fn weight(self, confidence: f64) -> f64 {
        let w = match self {
            Measure::Sampled => confidence.exp(),
            Measure::TopK => confidence,
        };
        if w.is_nan() { 0.0 } else { w.max(0.0) }
    }
}

impl std::fmt::Display for Measure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A measure's name that is not one: the text, kept for the error.
///
/// ```
/// let e = "mean".parse::<choicewise_proto::Measure>().unwrap_err();
/// assert_eq!(e.to_string(), r#"unknown measure "mean" (sampled, top_k)"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownMeasure(pub String);

impl std::fmt::Display for UnknownMeasure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown measure {:?} ({MEASURES})", self.0)
    }
}

impl std::error::Error for UnknownMeasure {}

impl std::str::FromStr for Measure {
    type Err = UnknownMeasure;

    fn from_str(s: &str) -> Result<Measure, UnknownMeasure> {
        match s {
            "sampled" => Ok(Measure::Sampled),
            "top_k" => Ok(Measure::TopK),
            other => Err(UnknownMeasure(other.to_string())),
        }
    }
}

/// A log-probability is a finite number at most 0.
pub(crate) fn valid(logprob: f64) -> bool {
    logprob.is_finite() && logprob <= 0.0
}

/// Token confidence as DeepConf defines it: the negative mean of the top-k
/// log-probabilities, `C = -(1/k) Σ_j log p(j)`. High when the model's probability mass is
/// on one token (the alternatives are very unlikely), low when it hesitates. `None` for no
/// log-probabilities, or when one is not a finite number at most 0.
///
/// ```
/// use choicewise_proto::token_confidence;
/// assert_eq!(token_confidence(&[-0.01, -5.0, -6.99]), Some(4.0));
/// assert_eq!(token_confidence(&[]), None);
/// assert_eq!(token_confidence(&[0.5]), None); // not a log-probability
/// ```
pub fn token_confidence(top_logprobs: &[f64]) -> Option<f64> {
    if top_logprobs.is_empty() || !top_logprobs.iter().all(|l| valid(*l)) {
        return None;
    }
    let sum: f64 = top_logprobs.iter().sum();
    Some(-sum / top_logprobs.len() as f64)
}

/// One sample's confidence, token by token: the group confidence (the mean token confidence
/// over a sliding window of the last `group_tokens` tokens) and the sample's confidence (its
/// lowest group confidence).
///
/// **Before a full window** (fewer than `group_tokens` tokens so far), the group confidence
/// is the mean over the tokens so far, and no full group has been seen: the online rule
/// stops a sample only on a full group ([`is_below`](Self::is_below)). The sample's
/// [`confidence`](Self::confidence) is its lowest group confidence over full windows; a
/// sample shorter than one window gets the mean over all its tokens (as the paper's
/// reference code does).
///
/// ```
/// use choicewise_proto::SampleConfidence;
/// let mut s = SampleConfidence::new(2);
/// assert_eq!(s.push(3.0), 3.0);            // one token: not a full group yet
/// assert_eq!((s.is_full(), s.confidence()), (false, Some(3.0)));
/// assert_eq!(s.push(1.0), 2.0);            // (3 + 1) / 2, the first full group
/// assert_eq!(s.push(2.0), 1.5);            // (1 + 2) / 2
/// assert_eq!(s.push(4.0), 3.0);            // (2 + 4) / 2
/// assert_eq!(s.confidence(), Some(1.5));   // the lowest full group
/// assert!(s.is_below(1.6) && !s.is_below(1.5));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SampleConfidence {
    group_tokens: usize,
    window: VecDeque<f64>,
    sum: f64,
    tokens: u64,
    lowest_full: Option<f64>,
}

impl SampleConfidence {
    /// A sample with no token yet, grouping `group_tokens` tokens (at least 1).
    ///
    /// ```
    /// use choicewise_proto::SampleConfidence;
    /// let s = SampleConfidence::new(64);
    /// assert_eq!((s.tokens(), s.group(), s.confidence()), (0, None, None));
    /// ```
    pub fn new(group_tokens: usize) -> Self {
        let group_tokens = group_tokens.max(1);
        SampleConfidence {
            group_tokens,
            window: VecDeque::with_capacity(group_tokens.min(4096)),
            sum: 0.0,
            tokens: 0,
            lowest_full: None,
        }
    }

    /// Adds one token's confidence; returns the group confidence after it. A value that is
    /// not finite is taken as 0 (no confidence) rather than poisoning the mean.
    ///
    /// ```
    /// use choicewise_proto::SampleConfidence;
    /// let mut s = SampleConfidence::new(3);
    /// s.push(1.0);
    /// s.push(2.0);
    /// assert_eq!(s.push(6.0), 3.0);
    /// assert_eq!(s.push(f64::NAN), 8.0 / 3.0); // NaN counts as 0
    /// ```
    pub fn push(&mut self, confidence: f64) -> f64 {
        let c = if confidence.is_finite() {
            confidence
        } else {
            0.0
        };
        if self.window.len() == self.group_tokens
            && let Some(old) = self.window.pop_front()
        {
            self.sum -= old;
        }
        self.window.push_back(c);
        self.sum += c;
        self.tokens += 1;
        if self.tokens.is_multiple_of(self.group_tokens as u64) {
            // Once per window, the sum is recomputed: no drift over long samples.
            self.sum = self.window.iter().sum();
        }
        let group = self.sum / self.window.len() as f64;
        if self.is_full() {
            self.lowest_full = Some(self.lowest_full.map_or(group, |l| l.min(group)));
        }
        group
    }

    /// Adds a token from the wire: its [`confidence`](TokenLogprob::confidence). A token
    /// without top log-probabilities is skipped (returns `None`, nothing changes).
    ///
    /// ```
    /// use choicewise_proto::{SampleConfidence, TokenLogprob};
    /// let mut s = SampleConfidence::new(4);
    /// assert_eq!(s.push_token(&TokenLogprob::new("a", None, [("a", -2.0)])), Some(2.0));
    /// assert_eq!(s.push_token(&TokenLogprob::new("b", None, [])), None);
    /// assert_eq!(s.tokens(), 1);
    /// ```
    pub fn push_token(&mut self, token: &TokenLogprob) -> Option<f64> {
        self.push_token_by(token, Measure::TopK)
    }

    /// Adds a token from the wire by `measure` ([`Measure::of`]); a token without what the
    /// measure reads is skipped (returns `None`, nothing changes).
    ///
    /// ```
    /// use choicewise_proto::{Measure, SampleConfidence, TokenLogprob};
    /// let mut s = SampleConfidence::new(2);
    /// assert_eq!(s.push_token_by(&TokenLogprob::new("a", Some(-1.0), []), Measure::Sampled), Some(-1.0));
    /// assert_eq!(s.push_token_by(&TokenLogprob::new("b", None, []), Measure::Sampled), None);
    /// ```
    pub fn push_token_by(&mut self, token: &TokenLogprob, measure: Measure) -> Option<f64> {
        measure.of(token).map(|c| self.push(c))
    }

    /// Tokens counted (those with top log-probabilities).
    ///
    /// ```
    /// use choicewise_proto::SampleConfidence;
    /// let mut s = SampleConfidence::new(4);
    /// s.push(1.0);
    /// assert_eq!(s.tokens(), 1);
    /// ```
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The current group confidence: the mean over the last `group_tokens` tokens (over all
    /// tokens so far before a full window); `None` before the first token.
    ///
    /// ```
    /// use choicewise_proto::SampleConfidence;
    /// let mut s = SampleConfidence::new(2);
    /// s.push(1.0);
    /// s.push(3.0);
    /// s.push(5.0);
    /// assert_eq!(s.group(), Some(4.0));
    /// ```
    pub fn group(&self) -> Option<f64> {
        (!self.window.is_empty()).then(|| self.sum / self.window.len() as f64)
    }

    /// Whether a full group (`group_tokens` tokens) has been seen.
    ///
    /// ```
    /// use choicewise_proto::SampleConfidence;
    /// let mut s = SampleConfidence::new(2);
    /// s.push(1.0);
    /// assert!(!s.is_full());
    /// s.push(1.0);
    /// assert!(s.is_full());
    /// ```
    pub fn is_full(&self) -> bool {
        self.window.len() == self.group_tokens
    }

    /// The sample's confidence: its lowest group confidence over full windows so far, or,
    /// before a full window, the mean over its tokens so far; `None` before any token.
    ///
    /// ```
    /// use choicewise_proto::SampleConfidence;
    /// let mut s = SampleConfidence::new(2);
    /// for c in [5.0, 1.0, 5.0] { s.push(c); }
    /// assert_eq!(s.confidence(), Some(3.0)); // groups (5, 1) and (1, 5)
    /// ```
    pub fn confidence(&self) -> Option<f64> {
        self.lowest_full.or_else(|| self.group())
    }

    /// Whether a full group's confidence has fallen below `threshold` (strictly): the online
    /// rule's test for stopping a sample. Never before a full group.
    ///
    /// ```
    /// use choicewise_proto::SampleConfidence;
    /// let mut s = SampleConfidence::new(2);
    /// s.push(0.1);
    /// assert!(!s.is_below(1.0)); // one token: not a full group
    /// s.push(0.1);
    /// assert!(s.is_below(1.0));
    /// ```
    pub fn is_below(&self, threshold: f64) -> bool {
        self.lowest_full.is_some_and(|l| l < threshold)
    }
}

/// The `q` quantile of `values` (`q` clamped to 0..=1), interpolated linearly between the
/// two nearest ranks (NumPy's default `percentile`, which the paper's reference code uses):
/// with the values sorted, position `h = (n - 1) q`, the value there interpolated between
/// `floor(h)` and `ceil(h)`. `None` for no values; values that are not finite are left out.
///
/// ```
/// use choicewise_proto::quantile;
/// assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0], 0.5), Some(2.5));
/// assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0], 0.25), Some(1.75)); // h = 0.75, between 1 and 2
/// assert_eq!(quantile(&[7.0], 0.9), Some(7.0));
/// assert_eq!(quantile(&[], 0.5), None);
/// ```
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
    let h = (sorted.len() - 1) as f64 * q;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    let (a, b) = (sorted[lo], sorted[hi.min(sorted.len() - 1)]);
    Some(a + (b - a) * (h - lo as f64))
}

/// The options of confidence-guided sampling (DeepConf online), built from
/// [`Confidence::new`] (or [`Confidence::for_measure`]) with one method per option. Values
/// out of range are clamped (see each method); `choicewise-core`'s `Pick::confidence` runs
/// the rule.
///
/// Each [`Measure`] has its own defaults, chosen on recorded sets (docs/gateway.md):
///
/// | measure | warmup | keep | group_tokens | weight | consensus |
/// |---|---|---|---|---|---|
/// | `sampled` (the default) | 8 | 0.1 | 4 | `exp(confidence)` | 0.95 |
/// | `top_k` (DeepConf's) | 8 | 0.9 | 64 | `confidence` | 0.95 |
///
/// ```
/// use choicewise_proto::{Confidence, Measure};
/// let c = Confidence::new().warmup(16).keep(0.1).group_tokens(2048).top_logprobs(20).consensus(0.9);
/// assert_eq!((c.warmup, c.keep, c.group_tokens, c.top_logprobs, c.consensus), (16, 0.1, 2048, 20, 0.9));
/// let d = Confidence::default();
/// assert_eq!((d.measure, d.warmup, d.keep, d.group_tokens, d.consensus), (Measure::Sampled, 8, 0.1, 4, 0.95));
/// let t = Confidence::for_measure(Measure::TopK);
/// assert_eq!((t.warmup, t.keep, t.group_tokens, t.top_logprobs, t.consensus), (8, 0.9, 64, 5, 0.95));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Confidence {
    /// How a token's confidence is measured (default [`Measure::Sampled`]); it also sets
    /// what an upstream is asked for and the vote's weight ([`Measure::weight`]).
    pub measure: Measure,
    /// The first `warmup` samples run to their end and set the threshold (default 8).
    pub warmup: usize,
    /// The share of warmup confidences that would pass: the threshold is their
    /// `(1 - keep)` quantile (default 0.1 for `sampled`, keeping the surest 10%; 0.9 for
    /// `top_k`, conservative).
    pub keep: f64,
    /// Tokens per group: the sliding window of the group confidence (default 4 for
    /// `sampled`, 64 for `top_k`).
    pub group_tokens: usize,
    /// How many top log-probabilities per token to ask an upstream for (`top_logprobs` in a
    /// Chat Completions request; default 5), with the `top_k` measure only: `sampled` asks
    /// none. The rule uses whatever `k` the upstream sends.
    pub top_logprobs: usize,
    /// The leader's share of the total confidence weight that decides the vote (default
    /// 0.95).
    pub consensus: f64,
}

impl Default for Confidence {
    fn default() -> Self {
        Confidence::for_measure(Measure::default())
    }
}

impl Confidence {
    /// The defaults, with the default measure (`sampled`): warmup 8, keep 0.1,
    /// group_tokens 4, top_logprobs 5 (not asked), consensus 0.95.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Confidence::new().warmup, 8);
    /// ```
    pub fn new() -> Self {
        Confidence::default()
    }

    /// The defaults of `measure` (see the table on the type).
    ///
    /// ```
    /// use choicewise_proto::{Confidence, Measure};
    /// assert_eq!(Confidence::for_measure(Measure::TopK).group_tokens, 64);
    /// assert_eq!(Confidence::for_measure(Measure::Sampled).group_tokens, 4);
    /// ```
    pub fn for_measure(measure: Measure) -> Self {
        let (keep, group_tokens) = match measure {
            Measure::Sampled => (0.1, 4),
            Measure::TopK => (0.9, 64),
        };
        Confidence {
            measure,
            warmup: 8,
            keep,
            group_tokens,
            top_logprobs: 5,
            consensus: 0.95,
        }
    }

    /// How many `top_logprobs` to ask an upstream for: the option with the `top_k` measure,
    /// `None` with `sampled` (`logprobs: true` alone).
    ///
    /// ```
    /// use choicewise_proto::{Confidence, Measure};
    /// assert_eq!(Confidence::new().asks_top_logprobs(), None);
    /// assert_eq!(Confidence::for_measure(Measure::TopK).asks_top_logprobs(), Some(5));
    /// ```
    pub fn asks_top_logprobs(&self) -> Option<usize> {
        match self.measure {
            Measure::Sampled => None,
            Measure::TopK => Some(self.top_logprobs.max(1)),
        }
    }

    /// A finished sample's vote weight from its confidence ([`Measure::weight`]).
    ///
    /// ```
    /// use choicewise_proto::{Confidence, Measure};
    /// assert_eq!(Confidence::new().weight(0.0), 1.0);
    /// assert_eq!(Confidence::for_measure(Measure::TopK).weight(3.0), 3.0);
    /// ```
    pub fn weight(&self, confidence: f64) -> f64 {
        self.measure.weight(confidence)
    }

    /// Warmup samples (at least 1).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Confidence::new().warmup(0).warmup, 1);
    /// ```
    pub fn warmup(mut self, samples: usize) -> Self {
        self.warmup = samples.max(1);
        self
    }

    /// The share kept, clamped to 0..=1 (NaN: the measure's default).
    ///
    /// ```
    /// use choicewise_proto::{Confidence, Measure};
    /// assert_eq!(Confidence::new().keep(1.5).keep, 1.0);
    /// assert_eq!(Confidence::new().keep(f64::NAN).keep, 0.1);
    /// assert_eq!(Confidence::for_measure(Measure::TopK).keep(f64::NAN).keep, 0.9);
    /// ```
    pub fn keep(mut self, share: f64) -> Self {
        self.keep = if share.is_nan() {
            Confidence::for_measure(self.measure).keep
        } else {
            share.clamp(0.0, 1.0)
        };
        self
    }

    /// Tokens per group (at least 1).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Confidence::new().group_tokens(0).group_tokens, 1);
    /// ```
    pub fn group_tokens(mut self, tokens: usize) -> Self {
        self.group_tokens = tokens.max(1);
        self
    }

    /// Top log-probabilities per token to ask for (at least 1).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Confidence::new().top_logprobs(3).top_logprobs, 3);
    /// ```
    pub fn top_logprobs(mut self, k: usize) -> Self {
        self.top_logprobs = k.max(1);
        self
    }

    /// The deciding share, clamped to 0..=1 (NaN: the default, 0.95).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Confidence::new().consensus(2.0).consensus, 1.0);
    /// ```
    pub fn consensus(mut self, share: f64) -> Self {
        self.consensus = if share.is_nan() {
            0.95
        } else {
            share.clamp(0.0, 1.0)
        };
        self
    }

    /// The threshold from the warmup samples' confidences: their `(1 - keep)` quantile
    /// ([`quantile`]); `None` without any.
    ///
    /// ```
    /// use choicewise_proto::Confidence;
    /// let warmup = [1.0, 2.0, 3.0, 4.0, 5.0];
    /// let low = Confidence::new().keep(0.9).threshold(&warmup).unwrap(); // most pass
    /// assert!((low - 1.4).abs() < 1e-9);
    /// let high = Confidence::new().keep(0.1).threshold(&warmup).unwrap(); // few pass
    /// assert!((high - 4.6).abs() < 1e-9);
    /// ```
    pub fn threshold(&self, warmup_confidences: &[f64]) -> Option<f64> {
        let keep = if self.keep.is_nan() {
            Confidence::for_measure(self.measure).keep
        } else {
            self.keep.clamp(0.0, 1.0)
        };
        quantile(warmup_confidences, 1.0 - keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn token_confidence_is_the_negative_mean_of_the_top_k() {
        // ln(0.5) = -0.693..., ln(0.25) = -1.386...: C = (0.693 + 1.386 + 1.386) / 3.
        let (a, b) = (0.5f64.ln(), 0.25f64.ln());
        let c = token_confidence(&[a, b, b]).unwrap();
        assert!(close(c, -(a + 2.0 * b) / 3.0));
        assert!(close(c, 1.155_245_300_933_242));
        // A sure token: the alternatives are very unlikely, the confidence high.
        assert_eq!(token_confidence(&[0.0, -10.0, -20.0]), Some(10.0));
        // An unsure one: two near-equal alternatives.
        assert_eq!(token_confidence(&[-0.5, -1.0]), Some(0.75));
        assert_eq!(token_confidence(&[-1.0, f64::NEG_INFINITY]), None);
        assert_eq!(token_confidence(&[-1.0, f64::NAN]), None);
    }

    #[test]
    fn the_group_slides_and_the_sample_keeps_its_lowest_full_group() {
        let mut s = SampleConfidence::new(3);
        let groups: Vec<f64> = [6.0, 3.0, 3.0, 0.0, 3.0, 9.0, 9.0]
            .into_iter()
            .map(|c| s.push(c))
            .collect();
        // 6; (6+3)/2; (6+3+3)/3; (3+3+0)/3; (3+0+3)/3; (0+3+9)/3; (3+9+9)/3.
        assert_eq!(groups, [6.0, 4.5, 4.0, 2.0, 2.0, 4.0, 7.0]);
        assert_eq!(s.confidence(), Some(2.0));
        assert_eq!(s.tokens(), 7);
        assert!(s.is_below(2.1) && !s.is_below(2.0));
    }

    #[test]
    fn a_sample_shorter_than_a_group_is_the_mean_of_its_tokens() {
        let mut s = SampleConfidence::new(64);
        for c in [1.0, 2.0, 6.0] {
            s.push(c);
        }
        assert_eq!(s.confidence(), Some(3.0));
        assert!(!s.is_full());
        // Never below anything before a full group: the online rule waits for one.
        assert!(!s.is_below(100.0));
    }

    #[test]
    fn a_long_sample_does_not_drift() {
        let mut s = SampleConfidence::new(4);
        for i in 0..100_000 {
            s.push(if i % 2 == 0 { 0.1 } else { 1e6 });
        }
        assert!(close(s.group().unwrap(), (0.1 + 1e6) / 2.0));
    }

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let v = [3.0, 1.0, 4.0, 1.5, 5.0];
        // Sorted 1, 1.5, 3, 4, 5; h = 4q.
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(5.0));
        assert_eq!(quantile(&v, 0.5), Some(3.0));
        assert!(close(quantile(&v, 0.1).unwrap(), 1.0 + 0.5 * 0.4)); // h = 0.4
        assert!(close(quantile(&v, 0.9).unwrap(), 4.0 + 1.0 * 0.6)); // h = 3.6
        assert_eq!(quantile(&v, -3.0), Some(1.0));
        assert_eq!(quantile(&[f64::NAN, 2.0], 0.5), Some(2.0));
        assert_eq!(quantile(&[f64::NAN], 0.5), None);
    }

    #[test]
    fn the_threshold_is_the_one_minus_keep_quantile() {
        // Eight warmup samples, as by default.
        let warmup = [10.0, 12.0, 14.0, 16.0, 11.0, 13.0, 15.0, 17.0];
        // keep 0.9: the 0.1 quantile, h = 0.7: 10 + 0.7 * (11 - 10).
        assert!(close(
            Confidence::new().keep(0.9).threshold(&warmup).unwrap(),
            10.7
        ));
        // keep 0.1: the 0.9 quantile, h = 6.3: 16 + 0.3 * (17 - 16).
        let high = Confidence::new().keep(0.1).threshold(&warmup).unwrap();
        assert!(close(high, 16.3));
        assert_eq!(Confidence::new().threshold(&[]), None);
    }

    #[test]
    fn wire_logprobs_parse_and_tolerate_garbage() {
        let update = json!({"content": [
            {"token": "A", "logprob": -0.2, "bytes": [65],
             "top_logprobs": [{"token": "A", "logprob": -0.2}, {"token": "B", "logprob": -1.8}]},
            {"token": "x", "logprob": -1.0, "top_logprobs": [{"token": "x", "logprob": 1.5}]},
            {"token": "y", "logprob": "bad", "top_logprobs": null},
            "not an entry",
            {"logprob": -0.3, "top_logprobs": [{"logprob": -0.3}]},
        ], "refusal": null});
        let tokens = TokenLogprob::parse(&update);
        assert_eq!(tokens.len(), 4);
        assert!(close(tokens[0].confidence().unwrap(), 1.0));
        assert!(tokens[1].top_logprobs.is_empty()); // a positive log-probability
        assert_eq!((tokens[2].logprob, tokens[2].confidence()), (None, None));
        assert_eq!(tokens[3].token, "");
        assert!(close(tokens[3].confidence().unwrap(), 0.3));
        for odd in [json!(null), json!([]), json!({"content": {}}), json!(5)] {
            assert!(TokenLogprob::parse(&odd).is_empty());
        }
        let mut s = SampleConfidence::new(2);
        let pushed: Vec<_> = tokens.iter().filter_map(|t| s.push_token(t)).collect();
        assert_eq!(pushed.len(), 2);
        assert!(close(s.confidence().unwrap(), 0.65));
    }

    #[test]
    fn options_clamp() {
        let c = Confidence::new()
            .warmup(0)
            .keep(-1.0)
            .group_tokens(0)
            .top_logprobs(0)
            .consensus(f64::NAN);
        assert_eq!(
            (
                c.warmup,
                c.keep,
                c.group_tokens,
                c.top_logprobs,
                c.consensus
            ),
            (1, 0.0, 1, 1, 0.95)
        );
        // keep 0: only the best passes (the threshold is the maximum).
        assert_eq!(c.threshold(&[1.0, 3.0, 2.0]), Some(3.0));
    }
}
