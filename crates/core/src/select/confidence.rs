//! The vote guided by confidence ([`Pick::confidence`](crate::Pick::confidence)): DeepConf's
//! online algorithm driven over the choices' streams. The arithmetic is
//! `choicewise-proto`'s ([`SampleConfidence`], [`Ballot`], [`Confidence::threshold`]);
//! this module watches each choice's log-probabilities, stops the unsure ones, starts samples
//! while the vote is undecided, and reports.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;
use tokio::sync::watch;

use choicewise_proto::{Ballot, ChoiceOutput, Confidence, Incomplete, Measure, SampleConfidence};

use crate::choice::Choice;
use crate::completions::Completions;
use crate::msg::CancelReason;
use crate::select::{
    Decided, Following, Judge, Places, Replacing, Tally, short_of, vote, vote_windowed,
};

/// What a vote guided by confidence did ([`Selection::confidence`](crate::Selection::confidence)):
/// either the rule ran ([`Applied`](Self::Applied)), or it could not and the plain vote
/// decided ([`Unavailable`](Self::Unavailable)) — never a silent change of meaning.
///
/// Serialised as `{"threshold": S, "warmup": [..], "stopped": [..], "weights": {"KEY": W}}`
/// (with `"unscored": [..]` when some finished choices had no log-probabilities), or
/// `{"unavailable": "REASON"}`.
///
/// ```
/// use choicewise_core::confidence::ConfidenceReport;
/// let report = ConfidenceReport::unavailable_for("no log-probabilities");
/// assert_eq!(serde_json::to_string(&report).unwrap(), r#"{"unavailable":"no log-probabilities"}"#);
/// assert_eq!(report.threshold(), None);
/// assert!(report.stopped().is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum ConfidenceReport {
    /// The rule ran.
    Applied(ConfidenceApplied),
    /// The rule could not run, and the plain vote decided.
    Unavailable {
        /// Why (no warmup choice carried top log-probabilities; the deadline passed before
        /// the warmup ended).
        unavailable: String,
    },
}

/// The figures of a vote guided by confidence that ran.
///
/// ```
/// use choicewise_core::confidence::{ConfidenceApplied, ConfidenceReport};
/// let applied = ConfidenceApplied::new(2.5, vec![0, 1], vec![3], [("42".to_string(), 7.25)].into());
/// let json = serde_json::to_value(ConfidenceReport::Applied(applied)).unwrap();
/// assert_eq!(json, serde_json::json!({"threshold": 2.5, "warmup": [0, 1], "stopped": [3], "weights": {"42": 7.25}}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ConfidenceApplied {
    /// The threshold: the `(1 - keep)` quantile of the warmup choices' confidences.
    pub threshold: f64,
    /// The warmup choices' indexes, ascending.
    pub warmup: Vec<u32>,
    /// The choices stopped because a group's confidence fell below the threshold,
    /// ascending. They do not vote. Each was cancelled (listed in
    /// [`Selection::cancelled`](crate::Selection::cancelled) too), unless its finish arrived
    /// before the cancel took effect.
    pub stopped: Vec<u32>,
    /// Each key's weight: the sum of the weights ([`Measure::weight`]) of the confidences of
    /// the choices that voted for it (those that finished with a confidence at least the
    /// threshold).
    pub weights: BTreeMap<String, f64>,
    /// Choices that finished with a key but carried no log-probabilities the measure reads,
    /// so had no confidence and did not vote, ascending (left out of the JSON when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unscored: Vec<u32>,
}

impl ConfidenceApplied {
    /// A report with these figures (and no unscored choice), for programs and tests.
    ///
    /// ```
    /// use choicewise_core::confidence::ConfidenceApplied;
    /// let a = ConfidenceApplied::new(1.0, vec![0], vec![], Default::default());
    /// assert_eq!(a.threshold, 1.0);
    /// ```
    pub fn new(
        threshold: f64,
        warmup: Vec<u32>,
        stopped: Vec<u32>,
        weights: BTreeMap<String, f64>,
    ) -> Self {
        ConfidenceApplied {
            threshold,
            warmup,
            stopped,
            weights,
            unscored: Vec::new(),
        }
    }
}

impl ConfidenceReport {
    /// A report of the fallback to the plain vote, with its reason.
    ///
    /// ```
    /// use choicewise_core::confidence::ConfidenceReport;
    /// assert_eq!(ConfidenceReport::unavailable_for("why").unavailable(), Some("why"));
    /// ```
    pub fn unavailable_for(reason: impl Into<String>) -> Self {
        ConfidenceReport::Unavailable {
            unavailable: reason.into(),
        }
    }

    /// Why the rule could not run, when it could not.
    ///
    /// ```
    /// use choicewise_core::confidence::{ConfidenceApplied, ConfidenceReport};
    /// let ran = ConfidenceReport::Applied(ConfidenceApplied::new(1.0, vec![0], vec![], Default::default()));
    /// assert_eq!(ran.unavailable(), None);
    /// ```
    pub fn unavailable(&self) -> Option<&str> {
        match self {
            ConfidenceReport::Unavailable { unavailable } => Some(unavailable),
            ConfidenceReport::Applied(_) => None,
        }
    }

    /// The threshold, when the rule ran.
    ///
    /// ```
    /// use choicewise_core::confidence::{ConfidenceApplied, ConfidenceReport};
    /// let ran = ConfidenceReport::Applied(ConfidenceApplied::new(1.5, vec![0], vec![], Default::default()));
    /// assert_eq!(ran.threshold(), Some(1.5));
    /// ```
    pub fn threshold(&self) -> Option<f64> {
        self.applied().map(|a| a.threshold)
    }

    /// The warmup choices (empty when the rule did not run).
    ///
    /// ```
    /// use choicewise_core::confidence::ConfidenceReport;
    /// assert!(ConfidenceReport::unavailable_for("why").warmup().is_empty());
    /// ```
    pub fn warmup(&self) -> &[u32] {
        self.applied().map_or(&[], |a| &a.warmup)
    }

    /// The choices stopped for low confidence (empty when the rule did not run).
    ///
    /// ```
    /// use choicewise_core::confidence::{ConfidenceApplied, ConfidenceReport};
    /// let ran = ConfidenceReport::Applied(ConfidenceApplied::new(1.0, vec![0], vec![4], Default::default()));
    /// assert_eq!(ran.stopped(), [4]);
    /// ```
    pub fn stopped(&self) -> &[u32] {
        self.applied().map_or(&[], |a| &a.stopped)
    }

    /// Each key's weight (empty when the rule did not run).
    ///
    /// ```
    /// use choicewise_core::confidence::ConfidenceReport;
    /// assert!(ConfidenceReport::unavailable_for("why").weights().is_empty());
    /// ```
    pub fn weights(&self) -> &BTreeMap<String, f64> {
        static EMPTY: BTreeMap<String, f64> = BTreeMap::new();
        self.applied().map_or(&EMPTY, |a| &a.weights)
    }

    /// The figures, when the rule ran.
    ///
    /// ```
    /// use choicewise_core::confidence::ConfidenceReport;
    /// assert!(ConfidenceReport::unavailable_for("why").applied().is_none());
    /// ```
    pub fn applied(&self) -> Option<&ConfidenceApplied> {
        match self {
            ConfidenceReport::Applied(a) => Some(a),
            ConfidenceReport::Unavailable { .. } => None,
        }
    }
}

/// A choice's end as the vote sees it.
struct Ended {
    index: u32,
    output: Result<ChoiceOutput, Incomplete<ChoiceOutput>>,
    confidence: Option<f64>,
    /// A group of its tokens fell below the threshold: it does not vote.
    stopped: bool,
}

impl super::following::Followed for Ended {
    fn index(&self) -> u32 {
        self.index
    }
}

/// Follows one choice's log-probabilities to its end. A choice not in the warmup is stopped
/// as soon as a full group falls below the threshold (once the threshold is known).
async fn follow(
    choice: Choice,
    measure: Measure,
    group_tokens: usize,
    warmup: bool,
    mut threshold: watch::Receiver<Option<f64>>,
) -> Ended {
    let mut confidence = SampleConfidence::new(group_tokens);
    // Only the numbers: each token's confidence by the measure, whether the stream kept the
    // text or not.
    let mut tokens = choice.token_confidences_by(measure);
    let mut stopped = false;
    let mut listening = !warmup;
    loop {
        if listening
            && let Some(s) = *threshold.borrow_and_update()
            && confidence.is_below(s)
        {
            stopped = true;
            break;
        }
        tokio::select! {
            token = tokens.next() => match token {
                Some(Ok(token)) => {
                    confidence.push(token);
                }
                _ => break,
            },
            changed = threshold.changed(), if listening => {
                if changed.is_err() {
                    listening = false;
                }
            }
        }
    }
    if stopped {
        // The reason travels with the cancel to the choice's closed state.
        choice.cancel_for(CancelReason::LowConfidence);
    }
    Ended {
        index: choice.index(),
        output: choice.message().await,
        confidence: confidence.confidence(),
        stopped,
    }
}

/// How a settled choice counts.
struct Counted {
    key: Option<String>,
    confidence: Option<f64>,
    stopped: bool,
    /// Its place in the finish order.
    place: u64,
}

/// The vote of [`Pick::confidence`](crate::Pick::confidence).
pub(crate) async fn vote_confident(
    completions: &Completions,
    deadline: Option<Duration>,
    key: &Judge<Option<String>>,
    options: Confidence,
    window: Option<usize>,
    min_votes: usize,
    answers_undecided: bool,
) -> Decided {
    let began = Instant::now();
    let warmup_n = options.warmup.max(1);
    let consensus = if options.consensus.is_nan() {
        0.95
    } else {
        options.consensus.clamp(0.0, 1.0)
    };
    let sampled = completions.samples_made();
    // A failed sample's replacement takes the next position, started by this vote: in the
    // warmup while it runs (it then counts towards the threshold in the failed sample's
    // place), else as one more sample. Those the readers started before the vote began are
    // samples like any other.
    let mut replacing = Replacing::new(completions, false);
    // How many choices there will be at most: the samples planned (with the replacements
    // reserved so far), else the choices declared.
    let planned = || match sampled {
        true => Some(completions.planned()),
        false => completions.expected_choices(),
    };
    let mut batches: Vec<Vec<u32>> = Vec::new();
    // Starts up to `count` more samples; records them as one batch (one choice each).
    let start = |count: usize, batches: &mut Vec<Vec<u32>>| {
        if !sampled {
            return;
        }
        let before = completions.started();
        let started = completions.start_more(count);
        if started > 0 {
            batches.push((before as u32..(before + started) as u32).collect());
        }
    };
    start(warmup_n.saturating_sub(completions.started()), &mut batches);
    if sampled && batches.is_empty() && completions.started() > 0 {
        // Started by the caller before the vote: the warmup all the same.
        batches.push((0..completions.started().min(warmup_n) as u32).collect());
    }
    // The positions from here on are this vote's to start: while the warmup runs, only the
    // replacements of its failed samples, which belong to it.
    let first_later = completions.started().max(warmup_n) as u32;
    // The warmup's replacements.
    let mut warmup_extra: Vec<u32> = Vec::new();

    let (threshold_tx, threshold_rx) = watch::channel(None::<f64>);
    let sleep = tokio::time::sleep(deadline.unwrap_or(Duration::MAX));
    tokio::pin!(sleep);
    let (measure, group_tokens) = (options.measure, options.group_tokens);
    let mut following = Following::new(completions, |choice: Choice| {
        let index = choice.index();
        // A replacement started while the warmup runs is one of its samples.
        let warmup = (index as usize) < warmup_n
            || (sampled && index >= first_later && threshold_rx.borrow().is_none());
        follow(choice, measure, group_tokens, warmup, threshold_rx.clone())
    })
    .in_finish_order();
    let mut counted: BTreeMap<u32, Counted> = BTreeMap::new();
    let mut threshold: Option<f64> = None;
    let mut ballot = Weighing::new(measure);
    let mut places = Places::new(completions);
    let mut rest_started = false;
    let mut winner: Option<String> = None;
    let mut timed_out = false;
    loop {
        tokio::select! {
            next = following.next() => {
                let Some(ended) = next else { break };
                let (seen, listed) = (following.seen(), following.listed());
                // A failed sample whose replacement was reserved: the replacement starts at
                // the next position, in the warmup if this sample was one of it.
                if replacing.take(ended.index, ended.output.is_err()) {
                    let position = completions.started() as u32;
                    let in_warmup = threshold.is_none()
                        && ((ended.index as usize) < warmup_n || warmup_extra.contains(&ended.index));
                    if completions.start_more(1) == 1 {
                        match (in_warmup, batches.first_mut()) {
                            (true, Some(first)) => {
                                warmup_extra.push(position);
                                first.push(position);
                            }
                            _ => batches.push(vec![position]),
                        }
                    }
                }
                let voted = match &ended.output {
                    Ok(output) if output.finished_well() && !ended.stopped => key(output),
                    _ => None,
                };
                let place = places.of(ended.index);
                counted.insert(ended.index, Counted {
                    key: voted.clone(),
                    confidence: ended.confidence,
                    stopped: ended.stopped,
                    place,
                });
                if let (Some(k), Some(c)) = (voted, ended.confidence) {
                    ballot.cast(ended.index, k, c, place);
                }
                if threshold.is_none() {
                    let total = if listed { Some(seen.max(planned().unwrap_or(0))) } else { planned() };
                    let members = WarmupMembers { replaced: replacing.all(), extra: &warmup_extra };
                    match warmup_over(&counted, &options, total, seen, members) {
                        Warmup::Running => continue,
                        Warmup::Threshold(s) => {
                            threshold = Some(s);
                            ballot.open(s);
                            let _ = threshold_tx.send(Some(s));
                        }
                        Warmup::Unscored(reason) => {
                            // The plain vote decides instead, over every choice.
                            drop(following);
                            let left = deadline.map(|d| d.saturating_sub(began.elapsed()));
                            let needs = (min_votes, answers_undecided);
                            return fall_back(completions, left, key, window, needs, reason)
                                .await;
                        }
                    }
                }
                let leads = ballot.ballot.leader().is_some_and(|l| l.votes >= min_votes);
                if ballot.ballot.reaches(consensus) && leads {
                    winner = ballot.ballot.leader().map(|l| l.key.to_string());
                    break;
                }
                // Undecided: more samples.
                match window {
                    None if !rest_started => {
                        rest_started = true;
                        start(usize::MAX, &mut batches);
                    }
                    Some(w) => {
                        let started = completions.started() as u32;
                        if (0..started).all(|i| counted.contains_key(&i)) {
                            // No more at once than the fewest votes that could decide: a
                            // sample beyond them would run after the stop that sampling one
                            // at a time makes (DeepConf's schedule, the reference's), and
                            // cost its tokens for nothing.
                            let fewest = (ballot.ballot)
                                .fewest_to_decide(consensus, min_votes, ballot.max_weight());
                            start(w.max(1).min(fewest.max(1)), &mut batches);
                        }
                    }
                    None => {}
                }
            }
            () = &mut sleep, if deadline.is_some() => {
                timed_out = true;
                break;
            }
        }
    }
    let seen = following.seen();
    drop(following);
    if threshold.is_none() && !timed_out {
        // Every choice is in, fewer than the warmup and their number learnt only at the end.
        let members = WarmupMembers {
            replaced: replacing.all(),
            extra: &warmup_extra,
        };
        match warmup_over(&counted, &options, Some(seen), seen, members) {
            Warmup::Threshold(s) => {
                threshold = Some(s);
                ballot.open(s);
            }
            Warmup::Unscored(reason) => {
                let needs = (min_votes, answers_undecided);
                return fall_back(completions, None, key, window, needs, reason).await;
            }
            Warmup::Running => {}
        }
    }
    let Weighing {
        ballot: weighted,
        mut voters,
        ..
    } = ballot;
    let total = planned()
        .unwrap_or(seen)
        .max(seen)
        .max(completions.choice_count());
    let Some(threshold) = threshold else {
        // The deadline passed before the warmup ended: the plain plurality over what is in.
        let reason = "the deadline passed before the warmup ended";
        return plain(&counted, total, timed_out, min_votes, reason);
    };
    let winner = winner.or_else(|| {
        let leader = weighted.leader()?;
        (leader.votes >= min_votes).then(|| leader.key.to_string())
    });
    let report = ConfidenceReport::Applied(ConfidenceApplied {
        threshold,
        warmup: (0..warmup_n.min(total) as u32)
            .chain(warmup_extra.iter().copied())
            .collect(),
        stopped: (counted.iter().filter(|(_, c)| c.stopped))
            .map(|(i, _)| *i)
            .collect(),
        weights: (weighted.ranked().iter())
            .map(|s| (s.key.to_string(), s.weight))
            .collect(),
        unscored: (counted.iter())
            .filter(|(_, c)| c.key.is_some() && c.confidence.is_none())
            .map(|(i, _)| *i)
            .collect(),
    });
    let votes_counted = weighted.counted();
    let decided = match winner {
        Some(k) => {
            let mut picked = voters.remove(&k).unwrap_or_default();
            picked.sort_unstable();
            Decided {
                vote: Some(Tally::won(k, picked.len(), votes_counted, total)),
                ..Decided::picked(picked, timed_out)
            }
        }
        None => {
            let reason = match (weighted.is_empty(), timed_out) {
                (false, _) => short_of(min_votes, &weighted),
                (true, true) => "the deadline passed before any choice voted".to_string(),
                (true, false) => {
                    "no choice finished with a key, a confidence and no stop to vote on".to_string()
                }
            };
            Decided::nothing(timed_out, &reason)
        }
    };
    Decided {
        windows: batches,
        confidence: Some(report),
        ..decided.with_ballot(weighted)
    }
}

/// The weighted vote: a choice votes with its confidence's weight ([`Measure::weight`]) if
/// its confidence is at least the threshold (as in the paper's reference code, the warmup's
/// choices too); votes cast before the threshold is known wait for it.
struct Weighing {
    measure: Measure,
    ballot: Ballot,
    voters: HashMap<String, Vec<u32>>,
    threshold: Option<f64>,
    /// The most a vote has weighed (by any sample's confidence, voting or not).
    heaviest: f64,
    /// Index, key, confidence, place in the finish order.
    waiting: Vec<(u32, String, f64, u64)>,
}

impl Weighing {
    fn new(measure: Measure) -> Self {
        Weighing {
            measure,
            ballot: Ballot::new(),
            voters: HashMap::new(),
            threshold: None,
            heaviest: 0.0,
            waiting: Vec::new(),
        }
    }

    /// The most one more vote may weigh: `exp` of a log-probability's mean is at most 1;
    /// a `top_k` confidence has no bound, and the heaviest seen stands for it.
    fn max_weight(&self) -> f64 {
        match self.measure {
            Measure::Sampled => 1.0,
            _ => self.heaviest,
        }
    }

    fn cast(&mut self, index: u32, key: String, confidence: f64, place: u64) {
        self.heaviest = self.heaviest.max(self.measure.weight(confidence));
        match self.threshold {
            None => self.waiting.push((index, key, confidence, place)),
            Some(s) if confidence >= s => {
                self.ballot
                    .add(&key, self.measure.weight(confidence), place);
                self.voters.entry(key).or_default().push(index);
            }
            Some(_) => {}
        }
    }

    fn open(&mut self, threshold: f64) {
        self.threshold = Some(threshold);
        for (index, key, confidence, place) in std::mem::take(&mut self.waiting) {
            self.cast(index, key, confidence, place);
        }
    }
}

/// Where the warmup is.
enum Warmup {
    /// Some warmup choice is still running.
    Running,
    /// Over: the threshold.
    Threshold(f64),
    /// Over, and no warmup choice had a confidence: why the rule cannot run.
    Unscored(String),
}

/// Which samples the warmup has besides its first positions: the failed ones replaced (out)
/// and their replacements (in).
#[derive(Clone, Copy)]
struct WarmupMembers<'a> {
    replaced: &'a HashSet<u32>,
    extra: &'a [u32],
}

/// Whether the warmup (choices `0..min(warmup, total)`, those replaced taken out and their
/// replacements in) is over, and its threshold. `total`: the choices there will be, when
/// known.
fn warmup_over(
    counted: &BTreeMap<u32, Counted>,
    options: &Confidence,
    total: Option<usize>,
    seen: usize,
    members: WarmupMembers<'_>,
) -> Warmup {
    let warmup = options.warmup.max(1);
    let need = total.map_or(warmup, |t| t.min(warmup));
    let warmup_samples: Vec<u32> = (0..need as u32)
        .filter(|i| !members.replaced.contains(i))
        .chain(
            members
                .extra
                .iter()
                .copied()
                .filter(|i| !members.replaced.contains(i)),
        )
        .collect();
    let over = warmup_samples.iter().all(|i| counted.contains_key(i))
        && (total.is_some() || seen >= warmup);
    if !over {
        return Warmup::Running;
    }
    let confidences: Vec<f64> = (warmup_samples.iter())
        .filter_map(|i| counted.get(i)?.confidence)
        .collect();
    match options.threshold(&confidences) {
        Some(s) => Warmup::Threshold(s),
        None => Warmup::Unscored(format!(
            "none of the {need} warmup choices carried {}",
            match options.measure {
                Measure::Sampled => "log-probabilities",
                _ => "top log-probabilities",
            }
        )),
    }
}

/// No warmup choice carried log-probabilities: the plain vote (windowed with `window`)
/// decides over every choice, and the report says why.
async fn fall_back(
    completions: &Completions,
    deadline: Option<Duration>,
    key: &Judge<Option<String>>,
    window: Option<usize>,
    (min_votes, answers_undecided): (usize, bool),
    reason: String,
) -> Decided {
    let decided = match window {
        Some(size) => {
            let answers = answers_undecided;
            vote_windowed(completions, deadline, |o| key(o), size, min_votes, answers).await
        }
        None => {
            // The plain vote places no replacement: the readers start them again.
            completions.readers_start_replacements();
            completions.start_more(usize::MAX);
            vote(
                completions,
                deadline,
                |o| key(o),
                min_votes,
                answers_undecided,
            )
            .await
        }
    };
    Decided {
        confidence: Some(ConfidenceReport::unavailable_for(reason)),
        ..decided
    }
}

/// The plain plurality over the choices settled so far, on the one ballot.
fn plain(
    counted: &BTreeMap<u32, Counted>,
    total: usize,
    timed_out: bool,
    min_votes: usize,
    reason: &str,
) -> Decided {
    let mut ballot = Ballot::new();
    let mut voters: HashMap<&str, Vec<u32>> = HashMap::new();
    for (i, c) in counted {
        if let Some(k) = &c.key {
            ballot.vote(k, c.place);
            voters.entry(k).or_default().push(*i);
        }
    }
    let report = Some(ConfidenceReport::unavailable_for(reason));
    let decided = match ballot.leader() {
        Some(leader) if leader.votes >= min_votes => Decided {
            vote: Some(Tally::won(
                leader.key.to_string(),
                leader.votes,
                ballot.counted(),
                total,
            )),
            confidence: report,
            ..Decided::picked(voters.remove(leader.key).unwrap_or_default(), timed_out)
        },
        Some(_) => Decided {
            confidence: report,
            ..Decided::nothing(timed_out, &short_of(min_votes, &ballot))
        },
        None => Decided {
            confidence: report,
            ..Decided::nothing(timed_out, "the deadline passed before any choice voted")
        },
    };
    decided.with_ballot(ballot)
}
