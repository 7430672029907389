//! The rules a [`Pick`](super::Pick) decides by, each until its decision: the first-* picks
//! (`first_n`), the plurality vote (all at once or window by window), and the best score.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::{Decided, Following, Judge, Places, Replacing, Rule, Tally, watch};
use crate::choice::Choice;
use crate::completions::Completions;
use choicewise_proto::{Ballot, ChoiceEvent, ChoiceOutput, Verdict};

/// The first `take` choices to qualify under a first-* rule, in the order they did: to
/// produce (`Token`), or to finish well (`First`), and be accepted (`Where`); hedged, one
/// more sample starts every `hedge` while fewer than `take` have.
pub(super) async fn first_n(
    completions: &Completions,
    deadline: Option<Duration>,
    rule: Rule,
    take: usize,
    hedge: Option<Duration>,
) -> Decided {
    let (reasons, accept): ([&str; 2], Option<Arc<Judge<bool>>>) = match rule {
        Rule::Token => (
            [
                "the deadline passed before any choice produced content or a tool call",
                "no choice produced content or a tool call",
            ],
            None,
        ),
        Rule::Where(accept) => (
            [
                "the deadline passed before a finished choice was accepted",
                "no choice finished with stop or tool_calls and was accepted",
            ],
            Some(Arc::new(accept)),
        ),
        _ => (
            [
                "the deadline passed before any choice finished",
                "no choice finished with stop or tool_calls",
            ],
            Some(Arc::new(Box::new(|_: &ChoiceOutput| true) as Judge<bool>)),
        ),
    };
    let sleep = tokio::time::sleep(deadline.unwrap_or(Duration::MAX));
    tokio::pin!(sleep);
    let hedge_timer = || hedge.map(|d| Box::pin(tokio::time::sleep(d)));
    let mut hedging = hedge_timer();
    // Each follower gives its choice's index, and whether the choice qualified.
    let following = Following::new(completions, |choice: Choice| {
        let accept = accept.clone();
        async move {
            let index = choice.index();
            let qualified = match accept {
                // A token: the choice's first event that produces.
                None => {
                    let mut events = choice.events();
                    let mut produced = false;
                    while let Some(Ok(event)) = events.next().await {
                        if ChoiceEvent::produces(&event) {
                            produced = true;
                            break;
                        }
                    }
                    produced
                }
                Some(accept) => match choice.message().await {
                    Ok(output) => output.finished_well() && accept(&output),
                    Err(_) => false,
                },
            };
            (index, qualified)
        }
    });
    // A first-finished pick takes the qualified choices in the order the stream finished
    // them; a first-token pick in the order they produced.
    let mut following = match accept.is_some() {
        true => following.in_finish_order(),
        false => following,
    };
    let mut selected: Vec<u32> = Vec::new();
    let timed_out = loop {
        if selected.len() >= take {
            break false;
        }
        tokio::select! {
            next = following.next() => match next {
                Some((index, true)) => selected.push(index),
                Some(_) => {}
                None => break false,
            },
            // Fewer than `take` yet (the loop ends at `take`): the next sample starts (none
            // left: no more hedges). A hedge that waited for none at all would leave the
            // samples not started unstarted, and a pick short of `take` waiting for them.
            () = async { hedging.as_mut().expect("guarded").await }, if hedging.is_some() =>
            {
                hedging = match completions.start_more(1) {
                    0 => None,
                    _ => hedge_timer(),
                };
            }
            () = &mut sleep, if deadline.is_some() => {
                // What qualified by now is decided, in finish order.
                let held = following.held().into_iter();
                selected.extend(held.filter(|(_, qualified)| *qualified).map(|(i, _)| i));
                break true;
            }
        }
    };
    selected.truncate(take);
    let reason = match (selected.is_empty(), timed_out) {
        (false, _) => None,
        (true, true) => Some(reasons[0].to_string()),
        (true, false) => Some(reasons[1].to_string()),
    };
    Decided {
        reason,
        ..Decided::picked(selected, timed_out)
    }
}

/// Plurality over `key`, decided as soon as the rest cannot change the winner.
pub(crate) async fn vote(
    completions: &Completions,
    deadline: Option<Duration>,
    key: impl Fn(&ChoiceOutput) -> Option<String>,
    min_votes: usize,
    answers_undecided: bool,
) -> Decided {
    // The choices there will be: for samples made on demand, those the started samples
    // declare and one for each sample planned but not started (a failed sample's
    // replacement is planned before the failure is seen); else those declared.
    let expected = || match completions.samples_made() {
        true => completions
            .declared_choices()
            .map(|n| n + completions.planned().saturating_sub(completions.started())),
        false => completions.expected_choices(),
    };
    // The ballot, and the voters of each key.
    let mut ballot = Ballot::new();
    let mut voters: HashMap<String, Vec<u32>> = HashMap::new();
    let mut places = Places::new(completions);
    let mut count = |result: Option<std::sync::Arc<ChoiceOutput>>, ballot: &mut Ballot| {
        if let Some(output) = result
            && output.finished_well()
            && let Some(k) = key(&output)
        {
            ballot.vote(&k, places.of(output.index));
            voters.entry(k).or_default().push(output.index);
        }
    };
    // Stopped as the ballot says: won, or short of a winner with an answer that cannot
    // change (a sample still running may vote: it keeps the vote open).
    let decides = |ballot: &Ballot, remaining: usize| {
        ballot.verdict(remaining, min_votes, answers_undecided) != Verdict::Open
    };
    // The results come in finish order; while the number of choices is unknown (an upstream
    // that did not declare its `n`, its stream not over) they wait, so that the vote stops at
    // the same place of that order on every run, however soon the total became known.
    let mut waiting = std::collections::VecDeque::new();
    let mut settled = 0usize;
    let mut total = 0usize;
    let mut stopped = false;
    let timed_out = watch(completions, deadline, |result, seen, listed| {
        waiting.push_back(result);
        let expected = expected();
        total = expected.unwrap_or(seen).max(seen);
        let all = match (expected, listed) {
            (_, true) => seen,
            (Some(n), false) => n.max(seen),
            (None, false) => return false,
        };
        while let Some(result) = waiting.pop_front() {
            settled += 1;
            count(result, &mut ballot);
            if decides(&ballot, all.saturating_sub(settled)) {
                stopped = true;
                return true;
            }
        }
        false
    })
    .await;
    // Every choice in, or the deadline passed: those still waiting count, in finish order,
    // up to the place where the vote would have stopped.
    let all = total.max(completions.choice_count());
    while !stopped && let Some(result) = waiting.pop_front() {
        settled += 1;
        count(result, &mut ballot);
        stopped = !timed_out && decides(&ballot, all.saturating_sub(settled));
    }
    let total = total.max(completions.choice_count());
    let decided = match ballot.leader() {
        Some(leader) if leader.votes < min_votes => {
            Decided::nothing(timed_out, &short_of(min_votes, &ballot))
        }
        Some(leader) => {
            let mut picked = voters.remove(leader.key).unwrap_or_default();
            picked.sort_unstable();
            Decided {
                vote: Some(Tally::won(
                    leader.key.to_string(),
                    leader.votes,
                    ballot.counted(),
                    total,
                )),
                ..Decided::picked(picked, timed_out)
            }
        }
        None if timed_out => Decided::nothing(true, "the deadline passed before any choice voted"),
        None => Decided::nothing(false, "no choice finished with a key to vote on"),
    };
    decided.with_ballot(ballot)
}

/// The windows of a windowed vote, made of positions (sample `k` is choice `k`): window `w`
/// is `size` positions from its start, and the replacements of its failed samples, each
/// given the next position when its failure is seen (the later windows start after it).
struct Windows {
    size: usize,
    /// Each window's first position.
    starts: Vec<usize>,
    /// Each window's replacements.
    extra: Vec<Vec<u32>>,
    /// The next position to give.
    next: usize,
}

impl Windows {
    fn new(size: usize) -> Self {
        Windows {
            size,
            starts: Vec::new(),
            extra: Vec::new(),
            next: 0,
        }
    }

    fn count(&self) -> usize {
        self.starts.len()
    }

    /// Opens the next window; returns the position its samples are started through.
    fn open(&mut self) -> usize {
        self.starts.push(self.next);
        self.extra.push(Vec::new());
        self.next += self.size;
        self.next
    }

    /// Gives window `w` one more position, a replacement's; returns the position samples
    /// are started through.
    fn replace_in(&mut self, w: usize) -> usize {
        self.extra[w].push(self.next as u32);
        self.next += 1;
        self.next
    }

    /// Window `w`'s choices, of the `total` there will be at most.
    fn members(&self, w: usize, total: usize) -> impl Iterator<Item = u32> + '_ {
        let start = self.starts[w];
        (start..(start + self.size).min(total).max(start))
            .map(|i| i as u32)
            .chain(self.extra[w].iter().copied())
    }

    /// The window choice `index` belongs to.
    fn of(&self, index: u32, total: usize) -> Option<usize> {
        (0..self.count()).find(|&w| self.members(w, total).any(|i| i == index))
    }
}

/// The windowed vote of [`Pick::window`]: windows of `size` choices in index order, samples
/// started window by window. A sample that fails while replacements remain
/// ([`replace_failed`](crate::CompletionsBuilder::replace_failed)) is replaced within its
/// window: it does not vote, and its replacement votes in its place.
pub(crate) async fn vote_windowed(
    completions: &Completions,
    deadline: Option<Duration>,
    key: impl Fn(&ChoiceOutput) -> Option<String>,
    size: usize,
    min_votes: usize,
    answers_undecided: bool,
) -> Decided {
    let sampled = completions.samples_made();
    // A failed sample's replacement takes the next position, in its own window: this vote
    // starts it, as it starts every sample.
    let mut replacing = Replacing::new(completions, true);
    // How many choices there will be at most: the samples planned (with the replacements
    // reserved so far), else the choices declared, else those seen (final once the stream
    // of choices ends).
    let planned = || match sampled {
        true => Some(completions.planned()),
        false => completions.expected_choices(),
    };
    // Samples a caller started before the vote (its first window, opened early to fail
    // before an answer begins) count towards it rather than shifting every window.
    let start_through = |end: usize| {
        if sampled {
            completions.start_more(end.saturating_sub(completions.started()));
        }
    };
    let mut windows = Windows::new(size);
    start_through(windows.open());
    let sleep = tokio::time::sleep(deadline.unwrap_or(Duration::MAX));
    tokio::pin!(sleep);
    let mut following = Following::new(completions, |choice: Choice| async move {
        (choice.index(), choice.shared_message().await)
    })
    .in_finish_order();
    // Each settled choice's key (`None`: it did not vote), and the ballot of those that did.
    let mut keys: HashMap<u32, Option<String>> = HashMap::new();
    let mut ballot = Ballot::new();
    let mut places = Places::new(completions);
    let mut winner: Option<String> = None;
    let mut timed_out = false;
    loop {
        tokio::select! {
            next = following.next() => {
                let Some((index, result)) = next else { break };
                let (seen, listed) = (following.seen(), following.listed());
                let total = planned().unwrap_or(seen).max(seen);
                // A failed sample whose replacement was reserved: the replacement takes
                // its place in its window.
                if let Some(w) = windows.of(index, total)
                    && replacing.take(index, result.is_none())
                {
                    start_through(windows.replace_in(w));
                }
                let voted = match result {
                    Some(output) if output.finished_well() => key(&output),
                    _ => None,
                };
                if let Some(k) = &voted {
                    ballot.vote(k, places.of(index));
                }
                keys.insert(index, voted);
                // A window's votes: every member but those replaced.
                let votes = |windows: &Windows, w: usize| {
                    (windows.members(w, total))
                        .filter(|i| !replacing.replaced(*i))
                        .map(|i| keys.get(&i))
                        .collect::<Vec<_>>()
                };
                // Opening a window may find its choices already settled (started before the
                // vote, or by a confidence-guided vote's warmup): it is judged at once, and
                // the next opened if it splits too, since no later event would judge it.
                let decided = loop {
                    // The first unanimous window decides.
                    let unanimous = (0..windows.count()).find_map(|w| {
                        let mut agreed: Option<&String> = None;
                        for k in votes(&windows, w) {
                            let k = k?.as_ref()?;
                            if agreed.is_some_and(|a| a != k) {
                                return None;
                            }
                            agreed = Some(k);
                        }
                        agreed.cloned()
                    });
                    if unanimous.is_some() {
                        break unanimous;
                    }
                    // The latest window can no longer be unanimous: the next one starts.
                    let settled: Vec<Option<&String>> = votes(&windows, windows.count() - 1)
                        .into_iter()
                        .flatten()
                        .map(Option::as_ref)
                        .collect();
                    let first = settled.iter().copied().flatten().next();
                    let split = settled.iter().any(|k| k.is_none() || *k != first);
                    if !(split && windows.next < total) {
                        break None;
                    }
                    start_through(windows.open());
                };
                if let Some(k) = decided {
                    winner = Some(k);
                    break;
                }
                // Every window started: the plurality, decided as soon as it cannot change.
                if windows.next >= total && (planned().is_some() || listed) {
                    let remaining = total.saturating_sub(keys.len());
                    match ballot.verdict(remaining, min_votes, answers_undecided) {
                        Verdict::Won => {
                            winner = ballot.leader().map(|l| l.key.to_string());
                            break;
                        }
                        Verdict::Short => break,
                        _ => {}
                    }
                }
            }
            () = &mut sleep, if deadline.is_some() => {
                timed_out = true;
                break;
            }
        }
    }
    let winner = winner.or_else(|| {
        let leader = ballot.leader()?;
        (leader.votes >= min_votes).then(|| leader.key.to_string())
    });
    let seen = following.seen();
    let total = planned().unwrap_or(seen).max(seen);
    let windows: Vec<Vec<u32>> = (0..windows.count())
        .map(|w| windows.members(w, total).collect())
        .collect();
    let decided = match winner {
        Some(k) => {
            let mut picked: Vec<u32> = (keys.iter())
                .filter(|(_, v)| v.as_ref() == Some(&k))
                .map(|(i, _)| *i)
                .collect();
            picked.sort_unstable();
            Decided {
                vote: Some(Tally::won(
                    k,
                    picked.len(),
                    ballot.counted(),
                    total.max(completions.choice_count()),
                )),
                windows,
                ..Decided::picked(picked, timed_out)
            }
        }
        None => {
            let reason = match (ballot.is_empty(), timed_out) {
                (false, _) => short_of(min_votes, &ballot),
                (true, true) => "the deadline passed before any choice voted".to_string(),
                (true, false) => "no choice finished with a key to vote on".to_string(),
            };
            Decided {
                windows,
                ..Decided::nothing(timed_out, &reason)
            }
        }
    };
    decided.with_ballot(ballot)
}

/// The most bytes [`short_of`] lists keys in: a reason stays under 4 KiB however many keys
/// voted (each is at most a few hundred bytes already, `shown_key`).
const REASON_TALLY_BYTES: usize = 3 * 1024;

/// The reason nothing won when keys voted but none had `min_votes`: the tally, in the
/// ballot's order, as far as [`REASON_TALLY_BYTES`] holds it, then how many keys more.
pub(crate) fn short_of(min_votes: usize, ballot: &Ballot) -> String {
    let ranked = ballot.ranked();
    let mut listed = String::new();
    let mut shown = 0;
    for s in &ranked {
        let entry = format!("{:?} {}", s.key, s.votes);
        if listed.len() + entry.len() + 2 > REASON_TALLY_BYTES {
            break;
        }
        if shown > 0 {
            listed.push_str(", ");
        }
        listed.push_str(&entry);
        shown += 1;
    }
    if shown < ranked.len() {
        let more = ranked.len() - shown;
        listed.push_str(&format!(
            "{}and {more} more key{}",
            if shown > 0 { ", " } else { "" },
            if more == 1 { "" } else { "s" }
        ));
    }
    format!("no key has {min_votes} votes (tally: {listed})")
}

/// The highest score of a good finish, once every choice is in (or at the deadline).
pub(super) async fn best(
    completions: &Completions,
    deadline: Option<Duration>,
    score: impl Fn(&ChoiceOutput) -> Option<f64>,
) -> Decided {
    let mut best: Option<(f64, u32)> = None;
    let timed_out = watch(completions, deadline, |result, _, _| {
        if let Some(output) = result
            && output.finished_well()
            && let Some(s) = score(&output).filter(|s| !s.is_nan())
            // Ties go to the choice that finished first.
            && best.is_none_or(|(b, _)| s > b)
        {
            best = Some((s, output.index));
        }
        false
    })
    .await;
    match best {
        Some((s, index)) => Decided {
            score: Some(s),
            ..Decided::picked(vec![index], timed_out)
        },
        None if timed_out => {
            Decided::nothing(true, "the deadline passed before any choice was scored")
        }
        None => Decided::nothing(
            false,
            "no choice finished with stop or tool_calls and a score",
        ),
    }
}
