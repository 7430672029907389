//! What a pick gives: its [`Selection`], a vote's [`Tally`] of [`KeyVotes`], and what a
//! rule decided before the rest is cancelled ([`Decided`]), with the tally completed from a
//! vote's judgements.

use std::fmt;

use serde::Serialize;

use super::Places;
use crate::completions::Completions;
use crate::select::confidence::ConfidenceReport;
use choicewise_proto::Ballot;

/// What a combinator picked, and what it cancelled to get there.
///
/// ```
/// # use choicewise_core::{Completions, Source};
/// # #[tokio::main] async fn main() {
/// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n";
/// let selection = Completions::new(Source::reader(sse.as_bytes())).first_finished().await;
/// assert_eq!(selection.selected, [0]);
/// assert!(selection.cancelled.is_empty());
/// assert_eq!(selection.reason, None);
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Selection {
    /// The indexes picked; empty when nothing could be (see `reason`). A first-* pick's in
    /// the order they qualified; a vote's, the winning key's voters in the order they
    /// finished (the first is the one to answer with); `best_of`'s one choice.
    pub selected: Vec<u32>,
    /// The indexes the combinator cancelled, ascending: the choices that ended cancelled. (A
    /// choice whose updates received before the cancel finished it is not listed; see
    /// [`Choice::cancel`](crate::Choice::cancel).)
    pub cancelled: Vec<u32>,
    /// Completion tokens the cancelled choices had received, estimated with tiktoken.
    pub cancelled_tokens: u64,
    /// The deadline passed before the answer was certain.
    pub timed_out: bool,
    /// Why nothing was selected, when nothing was; for a vote that no key won, why, also
    /// when [`or_first_finished`](crate::Pick::or_first_finished) selected a choice all the same.
    pub reason: Option<String>,
    /// The tally, for [`Completions::vote`].
    pub vote: Option<Tally>,
    /// The winning score, for [`Completions::best_of`].
    pub score: Option<f64>,
    /// For a completion of samples made on demand
    /// ([`samples`](crate::CompletionsBuilder::samples)): how many samples were started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<usize>,
    /// For a windowed vote ([`Pick::window`](crate::Pick::window)): each window's choice indexes, in the order the
    /// windows started.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<Vec<u32>>,
    /// For a vote guided by confidence ([`Pick::confidence`](crate::Pick::confidence)): the threshold, the warmup
    /// samples, the samples stopped for low confidence and each key's weight; or, when no
    /// warmup sample carried log-probabilities and the plain vote decided instead, why
    /// (serialised as `{"unavailable": "REASON"}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<ConfidenceReport>,
}

impl Selection {
    /// Whether choice `index` was stopped for low confidence by a vote guided by confidence
    /// ([`Pick::confidence`](crate::Pick::confidence)), rather than cancelled because the vote was decided (both are
    /// listed in [`cancelled`](Self::cancelled) when they ended cancelled): the vote's record
    /// ([`ConfidenceReport::stopped`]), which lists a stopped choice whose finish arrived
    /// before the cancel took effect too (it did not vote), where
    /// [`Choice::stopped_for_low_confidence`](crate::Choice::stopped_for_low_confidence),
    /// read from how the choice closed, says `false`.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let selection = Completions::new(Source::reader(sse.as_bytes())).first_finished().await;
    /// assert!(!selection.stopped_for_low_confidence(0)); // no confidence rule ran
    /// # }
    /// ```
    pub fn stopped_for_low_confidence(&self, index: u32) -> bool {
        self.confidence
            .as_ref()
            .is_some_and(|c| c.stopped().contains(&index))
    }
}

/// The outcome of a [`Completions::vote`]: the winning key and its support, and every key's
/// votes.
///
/// When no key won and the pick was told to answer anyway
/// ([`or_first_finished`](crate::Pick::or_first_finished)), `decided` is false, `key` is the key of
/// the choice selected instead (the first to finish well; empty when it had none) and
/// `votes` that key's votes.
///
/// ```
/// # use choicewise_core::{Completions, Source};
/// # #[tokio::main] async fn main() {
/// let sse = concat!(
///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"4\"},\"finish_reason\":\"stop\"}]}\n\n",
///     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"5\"},\"finish_reason\":\"stop\"}]}\n\n",
///     "data: {\"choices\":[{\"index\":2,\"delta\":{\"content\":\"4\"},\"finish_reason\":\"stop\"}]}\n\n",
/// );
/// let selection = Completions::new(Source::reader(sse.as_bytes())).vote(|o| o.message.content.clone()).await;
/// let tally = selection.vote.unwrap();
/// assert!(tally.decided);
/// assert_eq!((tally.key.as_str(), tally.votes, tally.counted), ("4", 2, 3));
/// assert_eq!(serde_json::to_value(&tally).unwrap()["tally"], serde_json::json!([
///     {"key": "4", "votes": 2}, {"key": "5", "votes": 1},
/// ]));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Tally {
    /// Whether a key won; false when the choice selected is the first to finish well,
    /// chosen because no key won ([`Pick::or_first_finished`](crate::Pick::or_first_finished)).
    pub decided: bool,
    /// The winning key (or the key of the choice selected instead), cut with its hash when
    /// longer than [`SHOWN_KEY_MAX_BYTES`] ([`shown_key`]).
    pub key: String,
    /// Votes for it.
    pub votes: usize,
    /// Votes counted: finished choices that had a key.
    pub counted: usize,
    /// Choices of the completion (expected, when known, else seen).
    pub choices: usize,
    /// Every key voted for and its votes, in the ballot's order (most votes, or weight; then
    /// the key whose voter finished first), the answer's key first. Keys longer than
    /// [`SHOWN_KEY_MAX_BYTES`] are shown cut, with their hash ([`shown_key`]).
    pub tally: Vec<KeyVotes>,
}

impl Tally {
    /// A key that won, with its support; its `tally` is filled when the pick concludes.
    pub(crate) fn won(key: String, votes: usize, counted: usize, choices: usize) -> Self {
        Tally {
            decided: true,
            key,
            votes,
            counted,
            choices,
            tally: Vec::new(),
        }
    }
}

/// The longest key a vote keeps and shows whole, in bytes. A longer key (a call with
/// megabytes of arguments, a long text) is kept and shown as [`shown_key`] writes it: its first
/// [`SHOWN_KEY_PREFIX_BYTES`], its length and its SHA-256, so that a vote holds a few hundred
/// bytes per key whatever its samples sent, and two keys that differ anywhere stay apart.
///
/// ```
/// assert_eq!(choicewise_core::defaults::SHOWN_KEY_MAX_BYTES, 256);
/// ```
pub const SHOWN_KEY_MAX_BYTES: usize = 256;

/// The bytes of a long key's beginning that [`shown_key`] keeps (fewer when they would cut a
/// character).
///
/// ```
/// assert_eq!(choicewise_core::defaults::SHOWN_KEY_PREFIX_BYTES, 200);
/// ```
pub const SHOWN_KEY_PREFIX_BYTES: usize = 200;

/// A vote's key as the vote keeps it and its [`Tally`] (`key`, `tally`) and a reason show it:
/// whole up to [`SHOWN_KEY_MAX_BYTES`]; longer, its first [`SHOWN_KEY_PREFIX_BYTES`] (cut at a
/// character's boundary), then `… (N bytes, sha256 HEX)` with its length and the SHA-256 of
/// the whole key. A cut key is always longer than [`SHOWN_KEY_MAX_BYTES`], so it never equals
/// a key kept whole; two long keys are one key exactly when their hashes are.
///
/// ```
/// use choicewise_core::select::shown_key;
/// assert_eq!(shown_key("42".to_string()), "42");
/// let long = format!("[[\"write\",{{\"text\":\"{}\"}}]]", "x".repeat(1000));
/// let shown = shown_key(long.clone());
/// assert!(shown.starts_with(&long[..200]) && shown.len() < 300);
/// assert!(shown.ends_with(&format!("… ({} bytes, sha256 {})", long.len(), &shown[shown.len() - 65..shown.len() - 1])));
/// // Keys that differ only past the cut stay apart.
/// assert_ne!(shown, shown_key(long.replace("x\"}", "y\"}")));
/// ```
pub fn shown_key(key: String) -> String {
    if key.len() <= SHOWN_KEY_MAX_BYTES {
        return key;
    }
    let mut shown = ShownKey::new();
    let _ = fmt::Write::write_str(&mut shown, &key);
    shown.finish()
}

/// A key as [`shown_key`] writes it, made from its text written piece by piece (a
/// [`fmt::Write`]) without keeping it: its first [`SHOWN_KEY_MAX_BYTES`] at most, its length
/// and its running SHA-256. A vote key written straight into it costs a few hundred bytes
/// whatever its length.
pub(crate) struct ShownKey {
    head: String,
    /// Whether a character did not fit in `head`: nothing more is added to it.
    full: bool,
    len: usize,
    hash: sha2::Sha256,
}

impl ShownKey {
    pub(crate) fn new() -> Self {
        use sha2::Digest;
        ShownKey {
            head: String::new(),
            full: false,
            len: 0,
            hash: sha2::Sha256::new(),
        }
    }

    /// The key as [`shown_key`] shows the text written.
    pub(crate) fn finish(self) -> String {
        use sha2::Digest;
        use std::fmt::Write;
        if self.len <= SHOWN_KEY_MAX_BYTES {
            return self.head;
        }
        let mut cut = SHOWN_KEY_PREFIX_BYTES;
        while !self.head.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut shown = String::with_capacity(cut + 100);
        shown.push_str(&self.head[..cut]);
        let _ = write!(shown, "… ({} bytes, sha256 ", self.len);
        for byte in self.hash.finalize() {
            let _ = write!(shown, "{byte:02x}");
        }
        shown.push(')');
        shown
    }
}

impl fmt::Write for ShownKey {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        use sha2::Digest;
        self.len += s.len();
        self.hash.update(s.as_bytes());
        if !self.full {
            let room = SHOWN_KEY_MAX_BYTES - self.head.len();
            let mut fits = room.min(s.len());
            while !s.is_char_boundary(fits) {
                fits -= 1;
            }
            self.head.push_str(&s[..fits]);
            self.full = fits < s.len();
        }
        Ok(())
    }
}

/// One key of a [`Tally`] and its votes.
///
/// ```
/// let v = choicewise_core::select::KeyVotes { key: "42".into(), votes: 3 };
/// assert_eq!(serde_json::to_value(&v).unwrap(), serde_json::json!({"key": "42", "votes": 3}));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyVotes {
    /// The key.
    pub key: String,
    /// The finished choices that voted for it.
    pub votes: usize,
}

/// A vote's judgements: each choice that finished well and its key, in the order they
/// finished.
pub(super) type Judged = Vec<(u32, Option<String>)>;

/// Completes a vote's tally from its ballot (or, for a rule that kept none, from its
/// judgements: each choice that finished well and its key, in the order they were judged),
/// listed in the ballot's order with the winner first; and, when no key won and
/// `or_first_finished`, selects the ballot's leader undecided, answered by its voter that
/// finished first (with no vote at all, the first choice to finish well).
pub(super) fn complete_tally(
    decided: &mut Decided,
    judged: &[(u32, Option<String>)],
    or_first_finished: bool,
    completions: &Completions,
) {
    let mut places = Places::new(completions);
    let ballot = decided.ballot.take().unwrap_or_else(|| {
        let mut ballot = Ballot::new();
        for (index, key) in judged {
            if let Some(key) = key {
                ballot.vote(key, places.of(*index));
            }
        }
        ballot
    });
    let mut tally: Vec<KeyVotes> = (ballot.ranked().iter())
        .map(|s| KeyVotes {
            key: s.key.to_string(),
            votes: s.votes,
        })
        .collect();
    if let Some(won) = &mut decided.vote {
        // The winner first: a windowed vote's first unanimous window decides for its key,
        // which need not hold the most votes of every window.
        if let Some(at) = tally.iter().position(|v| v.key == won.key) {
            let winner = tally.remove(at);
            tally.insert(0, winner);
        }
        won.tally = tally;
        return;
    }
    if !or_first_finished {
        return;
    }
    // Undecided: the leader's voter that finished first; without a vote, the first choice
    // to finish well (one whose tool calls' arguments were not JSON, say).
    let leader = ballot.leader().map(|l| l.key);
    let chosen = (judged.iter())
        .filter(|(_, key)| leader.is_some() && key.as_deref() == leader)
        .min_by_key(|(index, _)| places.of(*index))
        .or_else(|| judged.iter().min_by_key(|(index, _)| places.of(*index)));
    let Some((index, key)) = chosen else {
        // No choice finished well: one that ended with another finish reason of the
        // upstream's (`length`, `content_filter`) is still its answer, the lowest index first.
        let all: Vec<u32> = (0..completions.choice_count() as u32).collect();
        let answered = (completions.outputs(&all).into_iter())
            .filter(|o| !o.cancelled && !matches!(o.finish_reason.as_deref(), None | Some("error")))
            .map(|o| o.index)
            .min();
        if let Some(index) = answered {
            decided.selected = vec![index];
            decided.vote = Some(Tally {
                decided: false,
                key: String::new(),
                votes: 0,
                counted: 0,
                choices: completions.choice_count(),
                tally,
            });
        }
        return;
    };
    let key = key.clone().unwrap_or_default();
    let votes = ballot.get(&key).map_or(0, |s| s.votes);
    decided.selected = vec![*index];
    decided.vote = Some(Tally {
        decided: false,
        key,
        votes,
        counted: ballot.counted(),
        choices: completions.choice_count().max(judged.len()),
        tally,
    });
}

/// What a rule decided, before the rest is cancelled.
pub(crate) struct Decided {
    pub(crate) selected: Vec<u32>,
    pub(crate) timed_out: bool,
    pub(crate) reason: Option<String>,
    pub(crate) vote: Option<Tally>,
    pub(crate) score: Option<f64>,
    pub(crate) windows: Vec<Vec<u32>>,
    pub(crate) confidence: Option<ConfidenceReport>,
    /// A vote's ballot, whose order its tally is listed in.
    pub(crate) ballot: Option<Ballot>,
}

impl Decided {
    /// Nothing selected, and why.
    pub(crate) fn nothing(timed_out: bool, reason: &str) -> Self {
        Decided {
            reason: Some(reason.to_string()),
            ..Decided::picked(Vec::new(), timed_out)
        }
    }

    /// These choices selected.
    pub(crate) fn picked(selected: Vec<u32>, timed_out: bool) -> Self {
        Decided {
            selected,
            timed_out,
            reason: None,
            vote: None,
            score: None,
            windows: Vec::new(),
            confidence: None,
            ballot: None,
        }
    }

    /// With the ballot the vote counted on.
    pub(crate) fn with_ballot(self, ballot: Ballot) -> Self {
        Decided {
            ballot: Some(ballot),
            ..self
        }
    }
}
