//! The one ballot every vote counts on: each voter adds its weight (1 for a plain vote, its
//! confidence for a confidence-guided one) to its key, and says when it finished. The rule
//! that ranks the keys is [`Ballot::ranked`]'s, and nothing else decides a tie: most weight
//! (votes, for a plain vote), then the key whose first voter finished earliest.
//!
//! A voter's finish is its place in the order the choices' finishes arrived (`0` first): the
//! same on every run over the same input, whatever order the work behind the vote ran in.
//!
//! ```
//! use choicewise_proto::Ballot;
//! let mut ballot = Ballot::new();
//! ballot.vote("b", 2); // finished third
//! ballot.vote("a", 1); // finished second
//! ballot.vote("c", 0); // finished first
//! // 1:1:1: the key whose voter finished first leads.
//! assert_eq!(ballot.leader().unwrap().key, "c");
//! ballot.vote("a", 3);
//! let keys: Vec<&str> = ballot.ranked().iter().map(|s| s.key).collect();
//! assert_eq!(keys, ["a", "c", "b"]);
//! ```

use std::cmp::Ordering;

/// One key's standing in a [`Ballot`].
///
/// ```
/// let mut ballot = choicewise_proto::Ballot::new();
/// ballot.add("42", 2.5, 7);
/// let s = ballot.leader().unwrap();
/// assert_eq!((s.key, s.weight, s.votes, s.first), ("42", 2.5, 1, 7));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Standing<'a> {
    /// The key.
    pub key: &'a str,
    /// Its weight: the sum of its voters' weights (its votes, in a plain vote).
    pub weight: f64,
    /// Its voters.
    pub votes: usize,
    /// When its earliest voter finished (its place in the finish order, `0` first).
    pub first: u64,
}

/// Whether `a` ranks before `b`: more weight, then an earlier first finish, then (two voters
/// said to finish at one place, which a caller should not do) the smaller key, so that the
/// order is total and never depends on the order the votes were added in.
fn rank(a: &Standing<'_>, b: &Standing<'_>) -> Ordering {
    b.weight
        .total_cmp(&a.weight)
        .then(a.first.cmp(&b.first))
        .then_with(|| a.key.cmp(b.key))
}

/// Where a counted vote stands ([`Ballot::verdict`]): whether it has stopped, and how.
///
/// ```
/// use choicewise_proto::{Ballot, Verdict};
/// let mut ballot = Ballot::new();
/// ballot.vote("a", 0);
/// ballot.vote("a", 1);
/// assert_eq!(ballot.verdict(1, 2, false), Verdict::Won);
/// assert_eq!(ballot.verdict(3, 2, false), Verdict::Open); // three new votes for "b" win
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// A voter still to come could change the answer: the vote goes on.
    Open,
    /// The leader has enough votes and cannot be caught: it won.
    Won,
    /// No key can reach enough votes, and the answer cannot change any more: the vote is
    /// over without a winner.
    Short,
}

/// A vote's ballot: each key's weight, voters and first finish. Plain votes, windowed votes,
/// confidence-guided votes and the benchmark's offline reference all count on it, so one
/// rule decides every one of them ([`ranked`](Self::ranked)).
///
/// ```
/// use choicewise_proto::Ballot;
/// let mut vote = Ballot::new();
/// vote.add("a", 1.0, 0);
/// vote.add("b", 2.0, 1);
/// vote.add("a", 1.5, 2);
/// let leader = vote.leader().unwrap();
/// assert_eq!((leader.key, leader.weight, leader.votes), ("a", 2.5, 2));
/// assert_eq!(vote.total(), 4.5);
/// assert_eq!(vote.share(), Some(2.5 / 4.5));
/// assert!(vote.reaches(0.5) && !vote.reaches(0.6));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ballot {
    /// Key, weight, votes, first finish; in the order of the keys' first votes.
    keys: Vec<(String, f64, usize, u64)>,
    /// Whether some vote had a weight other than 1.
    weighted: bool,
}

impl Ballot {
    /// An empty ballot.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Ballot::new().leader(), None);
    /// ```
    pub fn new() -> Self {
        Ballot::default()
    }

    /// One plain vote for `key`, by a voter that finished at place `finished` (`0` first).
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.vote("x", 4);
    /// ballot.vote("x", 2);
    /// let s = ballot.leader().unwrap();
    /// assert_eq!((s.votes, s.weight, s.first), (2, 2.0, 2));
    /// assert!(!ballot.is_weighted());
    /// ```
    pub fn vote(&mut self, key: &str, finished: u64) {
        self.push(key, 1.0, finished);
    }

    /// One vote for `key` with `weight`, by a voter that finished at place `finished`. A
    /// weight that is not finite or is negative counts as 0: the vote is counted, with no
    /// weight.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.add("a", -1.0, 0);
    /// let s = ballot.leader().unwrap();
    /// assert_eq!((s.key, s.weight, s.votes), ("a", 0.0, 1));
    /// assert_eq!(ballot.share(), None); // no weight at all
    /// assert!(ballot.is_weighted());
    /// ```
    pub fn add(&mut self, key: &str, weight: f64, finished: u64) {
        let weight = if weight.is_finite() {
            weight.max(0.0)
        } else {
            0.0
        };
        self.weighted |= weight != 1.0;
        self.push(key, weight, finished);
    }

    fn push(&mut self, key: &str, weight: f64, finished: u64) {
        match self.keys.iter_mut().find(|(k, ..)| k == key) {
            Some((_, w, votes, first)) => {
                *w += weight;
                *votes += 1;
                *first = (*first).min(finished);
            }
            None => self.keys.push((key.to_string(), weight, 1, finished)),
        }
    }

    /// Whether some vote was weighted (a weight other than 1): the ballot of a
    /// confidence-guided vote.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.add("a", 1.0, 0);
    /// assert!(!ballot.is_weighted());
    /// ```
    pub fn is_weighted(&self) -> bool {
        self.weighted
    }

    /// The total weight.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.add("a", 0.5, 0);
    /// ballot.add("b", 0.25, 1);
    /// assert_eq!(ballot.total(), 0.75);
    /// ```
    pub fn total(&self) -> f64 {
        self.keys.iter().map(|(_, w, ..)| w).sum()
    }

    /// The votes counted, every key's.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.vote("a", 0);
    /// ballot.vote("b", 1);
    /// assert_eq!(ballot.counted(), 2);
    /// ```
    pub fn counted(&self) -> usize {
        self.keys.iter().map(|(_, _, v, _)| v).sum()
    }

    /// Whether no vote was counted.
    ///
    /// ```
    /// assert!(choicewise_proto::Ballot::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Every key, in the ballot's order: most weight first, then the key whose first voter
    /// finished earliest. A vote's tally is listed in this order, and its leader is the
    /// first.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.vote("late", 5);
    /// ballot.vote("early", 1);
    /// ballot.vote("late", 6);
    /// let keys: Vec<_> = ballot.ranked().iter().map(|s| (s.key, s.votes)).collect();
    /// assert_eq!(keys, [("late", 2), ("early", 1)]);
    /// ```
    pub fn ranked(&self) -> Vec<Standing<'_>> {
        let mut ranked: Vec<Standing<'_>> = self.standings().collect();
        ranked.sort_by(rank);
        ranked
    }

    fn standings(&self) -> impl Iterator<Item = Standing<'_>> {
        (self.keys.iter()).map(|(key, weight, votes, first)| Standing {
            key,
            weight: *weight,
            votes: *votes,
            first: *first,
        })
    }

    /// The leading key: the first of [`ranked`](Self::ranked); `None` before any vote.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.vote("second", 1);
    /// ballot.vote("first", 0);
    /// assert_eq!(ballot.leader().unwrap().key, "first");
    /// ```
    pub fn leader(&self) -> Option<Standing<'_>> {
        self.standings().min_by(rank)
    }

    /// The leader and the runner-up's weight (0 without one): what an early decision
    /// compares.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.vote("a", 0);
    /// ballot.vote("a", 1);
    /// ballot.vote("b", 2);
    /// let (leader, second) = ballot.leader_and_second().unwrap();
    /// assert_eq!((leader.key, second), ("a", 1.0));
    /// ```
    pub fn leader_and_second(&self) -> Option<(Standing<'_>, f64)> {
        let ranked = self.ranked();
        let leader = *ranked.first()?;
        Some((leader, ranked.get(1).map_or(0.0, |s| s.weight)))
    }

    /// `key`'s standing, if it has a vote.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.vote("a", 3);
    /// assert_eq!(ballot.get("a").unwrap().first, 3);
    /// assert!(ballot.get("b").is_none());
    /// ```
    pub fn get(&self, key: &str) -> Option<Standing<'_>> {
        self.standings().find(|s| s.key == key)
    }

    /// Where a counted vote stands with `remaining` voters still to come, each of which may
    /// vote for any key or for none, when a key needs `min_votes` votes to win. The one rule
    /// of when a vote stops, for every counted vote (plain, windowed, the benchmark's
    /// reference):
    ///
    /// - **won** once the leader has `min_votes` and cannot be caught (no other key can pass
    ///   it or tie it with an earlier first finish, even if every remaining voter votes for
    ///   that key), or when nobody remains;
    /// - **short** once no key can reach `min_votes` any more. When an undecided vote is
    ///   still answered (`answers_undecided`: by its leader's first voter, or, without a
    ///   vote, by a sample that finished without a key), it is short only once that answer
    ///   cannot change: its leader cannot be caught, or nobody remains. A vote with no key
    ///   yet stays open while any voter remains, so that a sample still running can vote.
    ///
    /// It stops as early as that allows: it is open exactly while some way the remaining
    /// voters could vote would change the outcome. It counts votes, not weights: a
    /// confidence-weighted vote stops on its leader's share ([`reaches`](Self::reaches)).
    ///
    /// ```
    /// use choicewise_proto::{Ballot, Verdict};
    /// let empty = Ballot::new();
    /// // Two samples finished without a key; one is still running.
    /// assert_eq!(empty.verdict(1, 2, false), Verdict::Short);
    /// assert_eq!(empty.verdict(1, 2, true), Verdict::Open);
    /// assert_eq!(empty.verdict(0, 2, true), Verdict::Short);
    /// let mut split = Ballot::new();
    /// split.vote("a", 0);
    /// split.vote("b", 1);
    /// // A third voter could still make "b" the leader.
    /// assert_eq!(split.verdict(1, 3, true), Verdict::Open);
    /// split.vote("a", 2);
    /// assert_eq!(split.verdict(0, 3, true), Verdict::Short);
    /// ```
    pub fn verdict(&self, remaining: usize, min_votes: usize, answers_undecided: bool) -> Verdict {
        let ranked = self.ranked();
        let votes = ranked.first().map_or(0, |s| s.votes);
        // The leader stays ahead whatever the voters to come do: no other key can pass it,
        // nor tie it with an earlier first finish, and a key new to the ballot (its voters
        // finish after every voter counted) cannot pass it.
        let uncatchable = ranked.first().is_some_and(|leader| {
            remaining <= leader.votes
                && ranked[1..].iter().all(|k| {
                    let most = k.votes + remaining;
                    most < leader.votes || (most == leader.votes && k.first > leader.first)
                })
        });
        if votes >= min_votes && (uncatchable || remaining == 0) {
            return Verdict::Won;
        }
        if remaining == 0 {
            return Verdict::Short;
        }
        let reachable = votes + remaining >= min_votes;
        match (reachable, answers_undecided) {
            (true, _) => Verdict::Open,
            (false, false) => Verdict::Short,
            (false, true) if uncatchable => Verdict::Short,
            (false, true) => Verdict::Open,
        }
    }

    /// The leader's share of the total weight; `None` while the total is 0.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.add("a", 3.0, 0);
    /// ballot.add("b", 1.0, 1);
    /// assert_eq!(ballot.share(), Some(0.75));
    /// ```
    pub fn share(&self) -> Option<f64> {
        let total = self.total();
        let leader = self.leader()?;
        (total > 0.0).then(|| leader.weight / total)
    }

    /// Whether the leader's share has reached `consensus` (`>=`): the vote is decided.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// ballot.add("a", 19.0, 0);
    /// ballot.add("b", 1.0, 1);
    /// assert!(ballot.reaches(0.95));
    /// ```
    pub fn reaches(&self, consensus: f64) -> bool {
        self.share().is_some_and(|s| s >= consensus)
    }

    /// The fewest votes more, each weighing at most `max_weight`, after which the vote could
    /// be decided: its leader holding `min_votes` votes and `consensus` of the weight (0 when
    /// it is; `usize::MAX` when no number of votes could make it). A windowed vote starts no
    /// more samples at once than this: the ones beyond it would run after a stop that
    /// sampling one at a time would have made.
    ///
    /// ```
    /// let mut ballot = choicewise_proto::Ballot::new();
    /// assert_eq!(ballot.fewest_to_decide(0.95, 2, 1.0), 2); // two votes of one key
    /// ballot.add("a", 0.9, 0);
    /// assert_eq!(ballot.fewest_to_decide(0.95, 2, 1.0), 1); // all the weight: one vote more
    /// ballot.add("b", 0.5, 1);
    /// // (0.9 + k) / (1.4 + k) >= 0.95 from k = 8.6: nine votes of weight 1.
    /// assert_eq!(ballot.fewest_to_decide(0.95, 2, 1.0), 9);
    /// assert_eq!(ballot.fewest_to_decide(1.0, 2, 1.0), usize::MAX);
    /// ```
    pub fn fewest_to_decide(&self, consensus: f64, min_votes: usize, max_weight: f64) -> usize {
        let (weight, votes) = self.leader().map_or((0.0, 0), |l| (l.weight, l.votes));
        let for_votes = min_votes.saturating_sub(votes);
        let short = consensus * self.total() - weight;
        let for_weight = if short <= 0.0 {
            0
        } else if consensus >= 1.0 || max_weight <= 0.0 || max_weight.is_nan() {
            usize::MAX
        } else {
            let k = (short / ((1.0 - consensus) * max_weight)).ceil();
            if k.is_finite() && k < usize::MAX as f64 {
                k as usize
            } else {
                usize::MAX
            }
        };
        for_votes.max(for_weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rule in ten lines, written apart from the ballot: for every key its weight, its
    /// votes and its voters' earliest finish; the winner the most weight, then the earliest
    /// first finish.
    fn reference(votes: &[(u8, u8, u64)]) -> Vec<(String, usize)> {
        let mut keys: Vec<(String, f64, usize, u64)> = Vec::new();
        for &(key, weight, finished) in votes {
            let key = format!("k{key}");
            if let Some(k) = keys.iter_mut().find(|k| k.0 == key) {
                (k.1, k.2, k.3) = (k.1 + f64::from(weight), k.2 + 1, k.3.min(finished));
            } else {
                keys.push((key, f64::from(weight), 1, finished));
            }
        }
        keys.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.3.cmp(&b.3)));
        keys.into_iter().map(|k| (k.0, k.2)).collect()
    }

    proptest! {
        /// Random ballots, random finish orders, many ties: the ballot ranks as the
        /// reference does, whatever order the votes arrive in.
        #[test]
        fn ranks_as_the_reference_in_any_arrival_order(
            keys in proptest::collection::vec((0u8..4, 0u8..3), 1..24),
            finish_seed in any::<u64>(),
            arrival_seed in any::<u64>(),
        ) {
            // Each voter's place in the finish order: a permutation of 0..len.
            let n = keys.len();
            let mut finish: Vec<u64> = (0..n as u64).collect();
            shuffle(&mut finish, finish_seed);
            let votes: Vec<(u8, u8, u64)> =
                keys.iter().zip(&finish).map(|(&(k, w), &f)| (k, w, f)).collect();
            let mut arrival = votes.clone();
            shuffle(&mut arrival, arrival_seed);
            let mut ballot = Ballot::new();
            for &(key, weight, finished) in &arrival {
                ballot.add(&format!("k{key}"), f64::from(weight), finished);
            }
            let got: Vec<(String, usize)> =
                ballot.ranked().iter().map(|s| (s.key.to_string(), s.votes)).collect();
            prop_assert_eq!(&got, &reference(&votes));
            prop_assert_eq!(ballot.leader().map(|s| s.key.to_string()), got.first().map(|g| g.0.clone()));
        }
    }

    /// A vote's outcome once every voter is in: the winner, or (no key with `min_votes`) the
    /// answer anyway, the leader or none, or nothing.
    fn outcome(ballot: &Ballot, min_votes: usize, answers: bool) -> (bool, Option<String>) {
        match ballot.leader() {
            Some(l) if l.votes >= min_votes => (true, Some(l.key.to_string())),
            Some(l) if answers => (false, Some(l.key.to_string())),
            _ => (false, None),
        }
    }

    /// Every outcome the `remaining` voters (each for a key voted so far, for a key new to
    /// the ballot, or for none; each finishing after every voter counted) could bring.
    fn outcomes(
        ballot: &Ballot,
        remaining: usize,
        min_votes: usize,
        answers: bool,
    ) -> std::collections::BTreeSet<(bool, Option<String>)> {
        let known: Vec<String> = ballot.ranked().iter().map(|s| s.key.to_string()).collect();
        let mut choices: Vec<Option<String>> = known.into_iter().map(Some).collect();
        choices.extend((0..remaining).map(|n| Some(format!("new{n}"))));
        choices.push(None);
        let mut all = std::collections::BTreeSet::new();
        for case in 0..choices.len().pow(remaining as u32) {
            let (mut completed, mut rest) = (ballot.clone(), case);
            for r in 0..remaining {
                if let Some(key) = &choices[rest % choices.len()] {
                    completed.vote(key, 1000 + r as u64);
                }
                rest /= choices.len();
            }
            all.insert(outcome(&completed, min_votes, answers));
        }
        all
    }

    proptest! {
        /// The verdict is exact: won when every way the remaining voters could vote gives
        /// the leader the win; short when every way ends in one outcome without a winner;
        /// open exactly when two ways would end differently.
        #[test]
        fn the_verdict_stops_exactly_when_nothing_can_change(
            keys in proptest::collection::vec(0u8..4, 0..7),
            remaining in 0usize..4,
            min_votes in 1usize..4,
            answers in any::<bool>(),
        ) {
            let mut ballot = Ballot::new();
            for (place, key) in keys.iter().enumerate() {
                ballot.vote(&format!("k{key}"), place as u64);
            }
            let all = outcomes(&ballot, remaining, min_votes, answers);
            let expected = match (all.len(), all.iter().next()) {
                (1, Some((true, _))) => Verdict::Won,
                (1, _) => Verdict::Short,
                _ => Verdict::Open,
            };
            prop_assert_eq!(ballot.verdict(remaining, min_votes, answers), expected, "{:?}", all);
        }
    }

    /// A Fisher–Yates shuffle driven by a small linear congruential generator: the test's
    /// own randomness, reproducible from proptest's seed.
    fn shuffle<T>(items: &mut [T], mut seed: u64) {
        for i in (1..items.len()).rev() {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            items.swap(i, (seed >> 33) as usize % (i + 1));
        }
    }

    #[test]
    fn the_weighted_tally_decides_at_the_consensus_share() {
        let mut vote = Ballot::new();
        vote.add("7", 12.0, 0);
        vote.add("8", 2.0, 1);
        vote.add("7", 10.0, 2);
        // 22 / 24 = 0.9166...
        let leader = vote.leader().unwrap();
        assert_eq!((leader.key, leader.weight, leader.votes), ("7", 22.0, 2));
        assert!((vote.share().unwrap() - 22.0 / 24.0).abs() < 1e-12);
        assert!(!vote.reaches(0.95));
        vote.add("7", 16.0, 3); // 38 / 40 = 0.95
        assert!(vote.reaches(0.95));
        // One confident vote outweighs two unsure ones.
        let mut vote = Ballot::new();
        vote.add("a", 1.0, 0);
        vote.add("a", 1.0, 1);
        vote.add("b", 5.0, 2);
        assert_eq!(vote.leader().unwrap().key, "b");
        // Ties go to the key whose voter finished first, not to the key voted first.
        let mut vote = Ballot::new();
        vote.add("x", 2.0, 1);
        vote.add("y", 2.0, 0);
        assert_eq!(vote.leader().unwrap().key, "y");
        vote.add("z", f64::INFINITY, 2);
        assert_eq!(vote.total(), 4.0);
    }
}
