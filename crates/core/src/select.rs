//! Combinators that pick choices while they stream ([`Completions::first_token`],
//! [`first_finished`](Completions::first_finished),
//! [`first_where`](Completions::first_where), [`vote`](Completions::vote),
//! [`best_of`](Completions::best_of)) and cancel what is no longer needed. Every selection a
//! program (the gateway, the CLI) makes is one of these, with its options.
//!
//! The rules they share live with the values they judge: a good finish is
//! [`ChoiceOutput::finished_well`], a choice producing is [`ChoiceEvent::produces`](crate::ChoiceEvent::produces).
//!
//! The crate root re-exports [`Pick`], [`Selection`] and [`VoteKey`]; a vote's [`Tally`]
//! and its [`KeyVotes`], and [`VoteKeyError`], are named here.

/// The confidence-guided vote (DeepConf online): a part of picking, over its vote.
pub(crate) mod confidence;
mod following;
mod rules;
mod selection;
mod vote_key;

pub use vote_key::{
    VOTE_PATTERN_MAX_BYTES, VOTE_PATTERN_MAX_DEPTH, VOTE_PATTERN_MAX_FOLDED_CLASSES,
    VOTE_PATTERN_SIZE_LIMIT, VoteKey, VoteKeyError,
};

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::completions::Completions;
use choicewise_proto::ChoiceOutput;
use choicewise_proto::Confidence;
use choicewise_proto::driver::Closed;
use confidence::vote_confident;
use following::{Following, Places, Replacing, watch};
use rules::{best, first_n};
pub(crate) use rules::{short_of, vote, vote_windowed};
pub(crate) use selection::Decided;
use selection::{Judged, complete_tally};
pub use selection::{
    KeyVotes, SHOWN_KEY_MAX_BYTES, SHOWN_KEY_PREFIX_BYTES, Selection, Tally, shown_key,
};

/// A caller's judgement of a finished choice.
pub(crate) type Judge<T> = Box<dyn Fn(&ChoiceOutput) -> T + Send + Sync>;

/// What a [`Pick`] decides by.
enum Rule {
    /// Every choice, nothing picked ([`PickRule::All`](crate::PickRule::All)).
    All,
    Token,
    First,
    Where(Judge<bool>),
    Vote(Judge<Option<String>>),
    Best(Judge<Option<f64>>),
}

/// A combinator over a completion's choices, made by [`Completions::first_finished`],
/// [`first_where`](Completions::first_where), [`vote`](Completions::vote) or
/// [`best_of`](Completions::best_of). Its options read as methods; `.await` runs it and gives
/// the [`Selection`].
///
/// By default it waits as long as the choices stream and, once decided, cancels every choice
/// not selected (dropping the upstreams nobody needs any more: the provider stops
/// generating). [`deadline`](Self::deadline) bounds the wait; [`keep_rest`](Self::keep_rest)
/// leaves the other choices streaming.
///
/// ```
/// # use std::time::Duration;
/// # use choicewise_core::{Completions, Source};
/// # #[tokio::main] async fn main() {
/// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n";
/// let completions = Completions::new(Source::reader(sse.as_bytes()));
/// let selection = completions
///     .first_finished()
///     .deadline(Duration::from_secs(30))
///     .keep_rest()
///     .await;
/// assert_eq!(selection.selected, [0]);
/// # }
/// ```
#[must_use = "a combinator does nothing until awaited"]
pub struct Pick<'a> {
    completions: &'a Completions,
    rule: Rule,
    take: usize,
    hedge_after: Option<Duration>,
    deadline: Option<Duration>,
    keep_rest: bool,
    window: Option<usize>,
    min_votes: usize,
    confidence: Option<Confidence>,
    or_first_finished: bool,
    /// Whether a vote's key already gives its keys as the vote keeps them
    /// ([`VoteKey::shown_of`](crate::VoteKey)), long ones never written whole.
    shown_keys: bool,
}

impl fmt::Debug for Pick<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = match self.rule {
            Rule::All => "all",
            Rule::Token => "first_token",
            Rule::First => "first_finished",
            Rule::Where(_) => "first_where",
            Rule::Vote(_) => "vote",
            Rule::Best(_) => "best_of",
        };
        f.debug_struct("Pick")
            .field("rule", &rule)
            .field("take", &self.take)
            .field("hedge_after", &self.hedge_after)
            .field("deadline", &self.deadline)
            .field("keep_rest", &self.keep_rest)
            .field("window", &self.window)
            .field("min_votes", &self.min_votes)
            .field("confidence", &self.confidence)
            .finish()
    }
}

impl<'a> Pick<'a> {
    fn new(completions: &'a Completions, rule: Rule) -> Self {
        Pick {
            completions,
            rule,
            take: 1,
            hedge_after: None,
            deadline: None,
            keep_rest: false,
            window: None,
            min_votes: 1,
            confidence: None,
            or_first_finished: false,
            shown_keys: false,
        }
    }

    /// Gives up waiting after `deadline` (from the `.await`): what is decided by then is the
    /// answer ([`Selection::timed_out`] says so), and, unless
    /// [`keep_rest`](Self::keep_rest), every choice still open is cancelled.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let stalled = futures::stream::pending::<Result<&str, std::io::Error>>();
    /// let completions = Completions::new(Source::sse(stalled));
    /// let selection = completions.first_finished().deadline(Duration::from_millis(10)).await;
    /// assert!(selection.timed_out && selection.selected.is_empty());
    /// # }
    /// ```
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Leaves the choices not selected streaming instead of cancelling them
    /// ([`Selection::cancelled`] is then empty): for a caller that shows the winner first
    /// but still wants the rest.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"b\"}}]}\n\n",
    ///     "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    /// );
    /// let completions = Completions::new(Source::reader(sse.as_bytes()));
    /// let selection = completions.first_finished().keep_rest().await;
    /// assert!(selection.cancelled.is_empty());
    /// let whole = completions.collect().await.unwrap();
    /// assert_eq!(whole.choices[1].finish_reason.as_deref(), Some("stop"));
    /// # }
    /// ```
    pub fn keep_rest(mut self) -> Self {
        self.keep_rest = true;
        self
    }

    /// Votes window by window, starting samples only while the vote is undecided
    /// (early-stopping self-consistency, with streaming). For [`vote`](Completions::vote)
    /// only; the other combinators ignore it.
    ///
    /// The choices are taken in windows of `size`, in index order (on a completion of
    /// [`samples`](crate::CompletionsBuilder::samples), one choice each, the samples are
    /// started window by window: the first window at once, the next when needed). A window is
    /// **unanimous** when its choices all finished (`stop` or `tool_calls`) with the same key;
    /// the first unanimous window decides: its key wins, every running choice is cancelled
    /// and no further sample starts. As soon as the latest window can no longer be unanimous
    /// (two of its finished choices differ, or one finished without a key), the next window
    /// starts at once, while the undecided window's choices run on and still vote. Once every
    /// window has started and none was unanimous, the plurality over all finished choices
    /// decides, as [`vote`](Completions::vote) does, early (the rest cancelled once they
    /// cannot change the winner), on the one ballot ([`Ballot`](crate::confidence::Ballot): ties to
    /// the key whose voter finished first). The last window is smaller when
    /// the total is not a multiple of `size`. As with the plain vote, the selected choices are
    /// every finished choice whose key won, in whichever window it ran;
    /// [`Selection::started`] and [`Selection::windows`] say how far it went. With
    /// [`replace_failed`](crate::CompletionsBuilder::replace_failed), a sample that fails
    /// (cut, malformed, silent) is replaced within its window: the replacement takes the next
    /// position, votes in the failed sample's place, and the later windows start after it.
    ///
    /// ```
    /// use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let answer = |text: &str| format!(
    ///     "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":\"stop\"}}]}}\n\n");
    /// // Up to 16 samples, which would answer 42 every time.
    /// let completions = Completions::builder()
    ///     .samples(16, move |_| Source::reader(std::io::Cursor::new(answer("42"))).n(1));
    /// let selection = completions
    ///     .vote(|m| m.message.content.clone())
    ///     .window(4)
    ///     .await;
    /// assert_eq!(selection.vote.unwrap().key, "42");
    /// assert_eq!(selection.started, Some(4)); // the first window agreed: 12 never started
    /// assert_eq!(selection.windows, [vec![0, 1, 2, 3]]);
    /// # }
    /// ```
    pub fn window(mut self, size: usize) -> Self {
        self.window = Some(size.max(1));
        self
    }

    /// When no key wins a vote ([`vote`](Completions::vote) only), selects the ballot's
    /// leader instead of nothing (the key with the most votes, ties to the key whose voter
    /// finished first: with every key at one vote, the first choice to finish), answered by
    /// its voter that finished first: an answer some sample gave is still an answer. When no
    /// choice voted, the first choice that finished well (`stop` or `tool_calls`; one whose
    /// tool call's arguments were not JSON, say). When none finished well, the lowest-numbered choice that
    /// ended with another finish reason of the upstream's (`length`, `content_filter`; not
    /// `error`, not cancelled). [`Selection::vote`] then says `decided: false`, with the
    /// tally; [`Selection::reason`] still says why no key won. Nothing is selected only when
    /// no choice finished.
    ///
    /// ```
    /// use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let answer = |a: &str| Source::reader(std::io::Cursor::new(format!(
    ///     "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{a}\"}},\"finish_reason\":\"stop\"}}]}}\n\n"))).n(1);
    /// let c = Completions::builder().fan_out([answer("41"), answer("42"), answer("43")]);
    /// let selection = c.vote(|m| m.message.content.clone()).min_votes(2).or_first_finished().await;
    /// assert_eq!(selection.selected.len(), 1); // every answer differs: the first to finish
    /// let tally = selection.vote.unwrap();
    /// assert!(!tally.decided);
    /// assert_eq!((tally.votes, tally.counted, tally.tally.len()), (1, 3, 3));
    /// assert!(selection.reason.unwrap().starts_with("no key has 2 votes"));
    /// # }
    /// ```
    pub fn or_first_finished(mut self) -> Self {
        self.or_first_finished = true;
        self
    }

    /// A key needs at least `votes` votes to win ([`vote`](Completions::vote) only; default
    /// 1, a plain plurality): with fewer, nothing is selected, [`Selection::reason`] giving
    /// the tally. The early decision waits for it, and gives up early once no key can reach
    /// it.
    ///
    /// ```
    /// use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let answer = |a: &str| Source::reader(std::io::Cursor::new(format!(
    ///     "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{a}\"}},\"finish_reason\":\"stop\"}}]}}\n\n"))).n(1);
    /// let c = Completions::builder().fan_out([answer("41"), answer("42"), answer("43")]);
    /// let selection = c.vote(|m| m.message.content.clone()).min_votes(2).await;
    /// assert!(selection.selected.is_empty()); // every answer differs: no winner
    /// // The tally: most votes first, then in the order of the first votes.
    /// let reason = selection.reason.unwrap();
    /// assert!(reason.starts_with("no key has 2 votes (tally: "), "{reason}");
    /// assert!(["\"41\" 1", "\"42\" 1", "\"43\" 1"].iter().all(|k| reason.contains(k)), "{reason}");
    /// # }
    /// ```
    pub fn min_votes(mut self, votes: usize) -> Self {
        self.min_votes = votes.max(1);
        self
    }

    /// Guides the vote by the model's confidence, as DeepConf's online algorithm does (Fu,
    /// Wang, Tian, Zhao, "Deep Think with Confidence", arXiv 2508.15260, 2025):
    /// [`vote`](Completions::vote) only; the other combinators ignore it. The choices need
    /// log-probabilities as the options' [`Measure`](crate::Measure) reads them: with
    /// `sampled` (the default) each token's own `logprob` (ask with `"logprobs": true`),
    /// with `top_k` the top log-probabilities (ask with `"logprobs": true, "top_logprobs": K`
    /// — [`Confidence::asks_top_logprobs`] is the `K` to ask for).
    ///
    /// - Each token's confidence is its sampled log-probability (`sampled`), or
    ///   `-(1/k) Σ_j log p(j)` over its top-k (`top_k`); a choice's group
    ///   confidence is the mean over its last `group_tokens` tokens (see
    ///   [`SampleConfidence`](crate::confidence::SampleConfidence)), its confidence the lowest
    ///   group confidence.
    /// - **Warmup**: the first `warmup` choices (by index) run to their end; the threshold is
    ///   the `(1 - keep)` quantile of their confidences.
    /// - **Online**: every later choice is stopped — cancelled, and its upstream dropped when
    ///   none of its choices is wanted any more — as soon as a full group's confidence falls
    ///   below the threshold; it does not vote
    ///   ([`Choice::stopped_for_low_confidence`](crate::Choice::stopped_for_low_confidence)
    ///   and [`ConfidenceReport::stopped`](confidence::ConfidenceReport::stopped) name it).
    /// - **Vote**: each choice that finishes with `stop` or `tool_calls`, has a key and a
    ///   confidence at least the threshold votes with its confidence's weight
    ///   ([`Measure::weight`](crate::Measure::weight): `exp(confidence)` for `sampled`, the
    ///   confidence for `top_k`; the warmup's
    ///   too: a warmup choice below the threshold runs to its end but does not vote, as in the
    ///   paper's reference code). Decided once the
    ///   warmup is over, as soon as the leader's share of the total weight reaches
    ///   `consensus`; else when every choice is in, to the key with the most weight (ties:
    ///   the key whose voter the stream finished first). [`min_votes`](Self::min_votes) still applies (to the winner's votes).
    ///
    /// On a completion of [`samples`](crate::CompletionsBuilder::samples) made on demand, the
    /// warmup samples start first, and more only while the vote is undecided: all the rest at
    /// once when the warmup ends, or with [`window`](Self::window) `W`, `W` at a time, each
    /// batch once every sample started before it has ended (one choice per sample);
    /// [`Selection::windows`] lists the warmup, then each batch. On fixed sources every
    /// choice streams from the start, and the later ones are stopped once the threshold is
    /// known if they already fell below it.
    ///
    /// **Fallback**: when no warmup choice carried the log-probabilities its measure reads, the plain vote
    /// (windowed with `window`) decides over every choice and
    /// [`Selection::confidence`] says why, `{"unavailable": "REASON"}`; the same when the
    /// [deadline](Self::deadline) passes before the warmup ended (the plain plurality over
    /// the choices in by then).
    ///
    /// ```
    /// use choicewise_core::{Completions, Source};
    /// use choicewise_core::confidence::{Confidence, Measure};
    /// # #[tokio::main] async fn main() {
    /// // One token each, whose top-2 log-probabilities give it confidence `c`.
    /// let sample = |answer: &str, c: f64| {
    ///     let token = serde_json::json!({"token": answer, "logprob": -c / 2.0, "top_logprobs": [
    ///         {"token": answer, "logprob": -c / 2.0}, {"token": "?", "logprob": -1.5 * c}]});
    ///     let chunk = serde_json::json!({"choices": [{"delta": {"content": answer},
    ///         "logprobs": {"content": [token]}, "finish_reason": "stop"}]});
    ///     Source::reader(std::io::Cursor::new(format!("data: {chunk}\n\n"))).n(1)
    /// };
    /// let answers = [("42", 4.0), ("41", 4.0), ("42", 0.5), ("42", 4.5)];
    /// let completions =
    ///     Completions::builder().samples(4, move |k| sample(answers[k].0, answers[k].1));
    /// let selection = completions
    ///     .vote(|m| m.message.content.clone())
    ///     .confidence(Confidence::for_measure(Measure::TopK).warmup(2).group_tokens(1))
    ///     .await;
    /// let report = selection.confidence.as_ref().unwrap();
    /// // The threshold: the 0.1 quantile of the warmup's 4 and 4. Undecided (4 against 4),
    /// // the rest start.
    /// assert_eq!(report.threshold(), Some(4.0));
    /// assert_eq!(report.warmup(), [0, 1]);
    /// assert_eq!(report.stopped(), [2]); // 0.5: below the threshold, no vote
    /// assert!(selection.stopped_for_low_confidence(2));
    /// assert_eq!(report.weights()["42"], 8.5); // samples 0 and 3
    /// assert_eq!(selection.selected, [0, 3]);
    /// # }
    /// ```
    pub fn confidence(mut self, options: Confidence) -> Self {
        self.confidence = Some(options);
        self
    }

    /// Selects the first `n` choices to qualify instead of the first one
    /// ([`first_token`](Completions::first_token), [`first_finished`](Completions::first_finished),
    /// [`first_where`](Completions::first_where) only): decided at the `n`-th, or with fewer
    /// when every choice is in.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let answer = |i: u32| format!("data: {{\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{i}\"}},\"finish_reason\":\"stop\"}}]}}\n\n");
    /// let c = Completions::new(Source::reader(std::io::Cursor::new(answer(2) + &answer(0) + &answer(1))));
    /// assert_eq!(c.first_finished().take(2).await.selected.len(), 2);
    /// # }
    /// ```
    pub fn take(mut self, n: usize) -> Self {
        self.take = n.max(1);
        self
    }

    /// Hedges a completion of samples made on demand
    /// ([`samples`](crate::CompletionsBuilder::samples)) against a slow upstream: one sample
    /// runs first (started now if none has), and while fewer than [`take`](Self::take) are
    /// selected one more starts every `after` (the first-* picks only; the others start
    /// every sample at once).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::stream;
    /// # #[tokio::main] async fn main() {
    /// let fast = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    /// let c = Completions::builder().samples(3, move |k| match k {
    ///     0 => Source::sse(stream::pending::<Result<&str, std::io::Error>>()).n(1), // silent
    ///     _ => Source::reader(fast.as_bytes()).n(1),
    /// });
    /// let selection = c.first_token().hedge_after(Duration::from_millis(20)).await;
    /// assert_eq!((selection.selected, selection.started), (vec![1], Some(2)));
    /// # }
    /// ```
    pub fn hedge_after(mut self, after: Duration) -> Self {
        self.hedge_after = Some(after);
        self
    }

    async fn run(self) -> Selection {
        let Pick {
            completions,
            rule,
            take,
            hedge_after,
            deadline,
            keep_rest,
            window,
            min_votes,
            confidence,
            or_first_finished,
            shown_keys,
        } = self;
        // A vote's judgements, in the order the choices finished well: its tally, and the
        // choice to answer with when no key wins.
        let judged: Arc<Mutex<Judged>> = Arc::default();
        let rule = match rule {
            Rule::Vote(key) => {
                let judged = Arc::clone(&judged);
                Rule::Vote(Box::new(move |output: &ChoiceOutput| {
                    // Kept once, as shown: a long key is its beginning and its hash.
                    let k = match shown_keys {
                        true => key(output),
                        false => key(output).map(shown_key),
                    };
                    let mut judged = judged.lock().unwrap_or_else(|e| e.into_inner());
                    if !judged.iter().any(|(i, _)| *i == output.index) {
                        judged.push((output.index, k.clone()));
                    }
                    k
                }))
            }
            rule => rule,
        };
        let voting = matches!(rule, Rule::Vote(_));
        let tallied = |mut decided: Decided| {
            if voting {
                let judged = judged.lock().unwrap_or_else(|e| e.into_inner());
                complete_tally(&mut decided, &judged, or_first_finished, completions);
                // The winning key's voters in the order they finished: the first answers.
                let mut places = Places::new(completions);
                decided.selected.sort_by_cached_key(|i| places.of(*i));
            }
            decided
        };
        if let Rule::All = rule {
            // Nothing to pick: every sample starts, every choice streams on.
            completions.start_more(usize::MAX);
            return Selection {
                selected: (0..take as u32).collect(),
                started: completions.samples_made().then(|| completions.started()),
                ..Selection::default()
            };
        }
        if let (Rule::Vote(key), Some(options)) = (&rule, confidence) {
            let answers = or_first_finished;
            let decided = vote_confident(
                completions,
                deadline,
                key,
                options,
                window,
                min_votes,
                answers,
            )
            .await;
            return (completions)
                .conclude(tallied(decided), keep_rest, true, false)
                .await;
        }
        let windowed = window.filter(|_| matches!(rule, Rule::Vote(_)));
        let first = matches!(rule, Rule::Token | Rule::First | Rule::Where(_));
        let hedge = hedge_after.filter(|_| first);
        if hedge.is_some() {
            // One sample first; the hedges start the others.
            if completions.started() == 0 {
                completions.start_more(1);
            }
        } else if windowed.is_none() {
            // Samples made on demand all start now.
            completions.start_more(usize::MAX);
        }
        let streaming = matches!(rule, Rule::Token);
        let decided = match (rule, windowed) {
            (Rule::Vote(key), Some(size)) => {
                let answers = or_first_finished;
                vote_windowed(completions, deadline, key, size, min_votes, answers).await
            }
            (Rule::Vote(key), None) => {
                vote(completions, deadline, key, min_votes, or_first_finished).await
            }
            (Rule::Best(score), _) => best(completions, deadline, score).await,
            (rule, _) => first_n(completions, deadline, rule, take, hedge).await,
        };
        completions
            .conclude(tallied(decided), keep_rest, first || voting, streaming)
            .await
    }
}

impl<'a> IntoFuture for Pick<'a> {
    type Output = Selection;
    type IntoFuture = Pin<Box<dyn Future<Output = Selection> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

impl Completions {
    /// Every choice, the first `take` of them selected at once, nothing cancelled: a
    /// [`Policy`](crate::Policy) of [`PickRule::All`](crate::PickRule::All).
    pub(crate) fn all(&self, take: usize) -> Pick<'_> {
        Pick {
            take: take.max(1),
            ..Pick::new(self, Rule::All)
        }
    }

    /// The first choice to produce something: a non-empty content delta or a tool call
    /// ([`ChoiceEvent::produces`](crate::ChoiceEvent::produces)), for a program that streams one answer as early as it can.
    /// Decided at that event: the selected choice streams on while the others are asked to
    /// stop (without waiting for them: [`Selection::cancelled`] lists those asked).
    /// [`take(n)`](Pick::take) selects the first `n`; on samples made on demand,
    /// [`hedge_after`](Pick::hedge_after) starts them one at a time.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::{StreamExt, stream};
    /// # #[tokio::main] async fn main() {
    /// let thinking = "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n";
    /// let writing = "data: {\"choices\":[{\"delta\":{\"content\":\"4\"}}]}\n\n";
    /// let open = |sse: &'static str| stream::iter([Ok::<_, std::io::Error>(sse)]).chain(stream::pending());
    /// let c = Completions::builder().fan_out([Source::sse(open(thinking)).n(1), Source::sse(open(writing)).n(1)]);
    /// // Once both choices have appeared, the one not selected is among those asked to stop.
    /// let both: Vec<_> = c.choices().take(2).collect().await;
    /// let selection = c.first_token().await;
    /// assert_eq!((selection.selected, selection.cancelled), (vec![1], vec![0]));
    /// # }
    /// ```
    pub fn first_token(&self) -> Pick<'_> {
        Pick::new(self, Rule::Token)
    }

    /// The first choice to finish with `stop` or `tool_calls` (not `length`,
    /// `content_filter`, an error or a cancel). Once it is in, every other choice is
    /// cancelled at once (dropping the upstreams nobody needs any more). Nothing is selected
    /// when no choice finishes so, or when the [deadline](Pick::deadline) passes first.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::stream;
    /// # #[tokio::main] async fn main() {
    /// let fast = "data: {\"choices\":[{\"delta\":{\"content\":\"done\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let slow = "data: {\"choices\":[{\"delta\":{\"content\":\"thinking\"}}]}\n\n";
    /// let stalled = futures::StreamExt::chain(stream::iter([Ok::<_, std::io::Error>(slow)]), stream::pending());
    /// let c = Completions::builder()
    ///     .fan_out([Source::sse(stalled).n(1), Source::reader(fast.as_bytes()).n(1)]);
    /// let selection = c.first_finished().await;
    /// assert_eq!((selection.selected, selection.cancelled), (vec![1], vec![0]));
    /// assert!(c.outcome().await.is_ok()); // the stalled upstream was dropped
    /// # }
    /// ```
    pub fn first_finished(&self) -> Pick<'_> {
        Pick::new(self, Rule::First)
    }

    /// The first choice to finish with `stop` or `tool_calls` whose assembled message
    /// satisfies `accept` (for example: its tool call's arguments deserialize into the type
    /// the program expects); then the rest is cancelled, as for
    /// [`first_finished`](Self::first_finished). Nothing is selected when no choice is
    /// accepted.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let answer = |i: u32, a: &str| format!("data: {{\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{a}\"}},\"finish_reason\":\"stop\"}}]}}\n\n");
    /// let sse = answer(0, "about four") + &answer(1, "4");
    /// let c = Completions::new(Source::reader(std::io::Cursor::new(sse)));
    /// let is_number = |o: &choicewise_core::ChoiceOutput| {
    ///     o.message.content.as_deref().is_some_and(|t| t.trim().parse::<i64>().is_ok())
    /// };
    /// assert_eq!(c.first_where(is_number).await.selected, [1]);
    /// # }
    /// ```
    pub fn first_where<F>(&self, accept: F) -> Pick<'_>
    where
        F: Fn(&ChoiceOutput) -> bool + Send + Sync + 'static,
    {
        Pick::new(self, Rule::Where(Box::new(accept)))
    }

    /// Plurality vote over `key` of each choice that finishes with `stop` or `tool_calls`
    /// (a choice whose key is `None` does not vote), decided **early**: as soon as the
    /// choices still running (and those still to appear, when the upstreams' `n` are known)
    /// could no longer change the winner even all voting for the runner-up, the rest are
    /// cancelled. Selected: every finished choice whose key won.
    ///
    /// One rule ranks the keys, the same for every vote ([`Ballot`](crate::confidence::Ballot)):
    /// most votes, then the key whose first voter the stream finished earliest (the order the
    /// readers routed the finish reasons in, the same on every run over the same input,
    /// whichever choice's work ran first). The tally is listed in that order. Nothing is
    /// selected when no choice voted (all failed, were cut off, or had no key).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::stream;
    /// # #[tokio::main] async fn main() {
    /// let answer = |a: &'static str| format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{a}\"}},\"finish_reason\":\"stop\"}}]}}\n\n");
    /// let stalled = || stream::pending::<Result<String, std::io::Error>>();
    /// let ready = |a| stream::iter([Ok::<_, std::io::Error>(answer(a))]);
    /// let c = Completions::builder().fan_out([
    ///     Source::sse(ready("42")).n(1),
    ///     Source::sse(stalled()).n(1),
    ///     Source::sse(ready(" 42 ")).n(1),
    ///     Source::sse(ready("42")).n(1),
    /// ]);
    /// // Three votes needed: decided at the third 42, since the stalled upstream could not
    /// // change the winner.
    /// let key = |m: &choicewise_core::ChoiceOutput| m.message.content.as_deref().map(|t| t.trim().to_string());
    /// let selection = c.vote(key).min_votes(3).await;
    /// let tally = selection.vote.unwrap();
    /// assert_eq!((tally.key.as_str(), tally.votes, tally.counted, tally.choices), ("42", 3, 3, 4));
    /// let mut voters = selection.selected; // in the order they finished
    /// voters.sort_unstable();
    /// assert_eq!(voters, [0, 2, 3]);
    /// assert!(c.outcome().await.is_ok()); // the stalled upstream was dropped
    /// # }
    /// ```
    pub fn vote<F>(&self, key: F) -> Pick<'_>
    where
        F: Fn(&ChoiceOutput) -> Option<String> + Send + Sync + 'static,
    {
        Pick::new(self, Rule::Vote(Box::new(key)))
    }

    /// [`vote`](Self::vote) on `key`, each key made as the vote keeps it (a long one cut,
    /// with its hash) without being written whole.
    pub(crate) fn vote_on(&self, key: crate::VoteKey) -> Pick<'_> {
        Pick {
            shown_keys: true,
            ..self.vote(move |o| key.shown_of(o))
        }
    }

    /// The choice with the highest `score` among those that finish with `stop` or
    /// `tool_calls` (a `None` or NaN score does not compete), decided when every choice is
    /// in, or at the [deadline](Pick::deadline) among those in by then (the rest is then
    /// cancelled). Ties go to the choice that finished first. [`Selection::score`] is the
    /// winning score.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let answer = |i: u32, a: &str| format!("data: {{\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{a}\"}},\"finish_reason\":\"stop\"}}]}}\n\n");
    /// let sse = answer(0, "short") + &answer(1, "the longest one") + &answer(2, "medium");
    /// let c = Completions::new(Source::reader(std::io::Cursor::new(sse)));
    /// let longest = |o: &choicewise_core::ChoiceOutput| o.message.content.as_ref().map(|t| t.len() as f64);
    /// let selection = c.best_of(longest).await;
    /// assert_eq!((selection.selected, selection.score), (vec![1], Some(15.0)));
    /// # }
    /// ```
    pub fn best_of<F>(&self, score: F) -> Pick<'_>
    where
        F: Fn(&ChoiceOutput) -> Option<f64> + Send + Sync + 'static,
    {
        Pick::new(self, Rule::Best(Box::new(score)))
    }

    /// Cancels everything not selected (unless `keep_rest`) and counts what the cancelled
    /// choices had received.
    ///
    /// A first-* pick's selection stays in the order the choices qualified (`in_order`); a
    /// first-token pick's selected choices are still streaming (`streaming`): the others are
    /// asked to stop without waiting for them, and `cancelled` lists those asked.
    async fn conclude(
        &self,
        decided: Decided,
        keep_rest: bool,
        in_order: bool,
        streaming: bool,
    ) -> Selection {
        let Decided {
            mut selected,
            timed_out,
            reason,
            vote,
            score,
            windows,
            confidence,
            ballot: _,
        } = decided;
        if !in_order {
            selected.sort_unstable();
        }
        let sampled = self.samples_made();
        // Decided: no further sample starts, whatever happens to the rest.
        self.stop_sampling();
        let cancelled = match (keep_rest, streaming) {
            (true, _) => Vec::new(),
            (false, false) => self.cancel_for(crate::cancel::CancelReason::Decided).await,
            (false, true) => {
                self.cancel_except_for(&selected, crate::cancel::CancelReason::Decided);
                self.still_open_except(&selected)
            }
        };
        let cancelled_tokens = self.estimated_tokens(&cancelled).await;
        Selection {
            selected,
            cancelled,
            cancelled_tokens,
            timed_out,
            reason,
            vote,
            score,
            started: sampled.then(|| self.started()),
            windows,
            confidence,
        }
    }
}

impl Completions {
    /// The choices not in `except` that have not finished or failed, ascending.
    fn still_open_except(&self, except: &[u32]) -> Vec<u32> {
        let mut open: Vec<u32> = (self.entries().iter())
            .filter(|c| !except.contains(&c.index()))
            .filter(|c| {
                let published = c.log.lock();
                !matches!(
                    published.phase.closed(),
                    Some(Closed::Ended { .. } | Closed::Failed(_))
                )
            })
            .map(|c| c.index())
            .collect();
        open.sort_unstable();
        open
    }

    /// The completion tokens these choices received, estimated (0 without the `estimate`
    /// feature).
    async fn estimated_tokens(&self, indexes: &[u32]) -> u64 {
        #[cfg(feature = "estimate")]
        {
            if indexes.is_empty() {
                return 0;
            }
            let outputs = self.outputs(indexes);
            let model = self.model();
            let encoding =
                choicewise_usage::encoding_for_model(model.as_deref().unwrap_or_default()).name;
            let bytes = outputs.iter().map(|o| o.text_bytes()).sum();
            let count = move || -> u64 {
                (outputs.iter())
                    .map(|o| o.completion_tokens(encoding))
                    .sum()
            };
            let quick = choicewise_usage::counts_quickly(encoding, bytes);
            crate::counting::counted(quick, count).await.unwrap_or(0)
        }
        #[cfg(not(feature = "estimate"))]
        {
            let _ = indexes;
            0
        }
    }
}
