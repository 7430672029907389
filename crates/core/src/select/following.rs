//! The scaffolding every rule decides over: a completion's choices as they appear, each
//! followed by a task of its own, and the tasks' results as they end.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use tokio::task::JoinSet;

use crate::choice::Choice;
use crate::completions::{Choices, Completions};
use choicewise_proto::{ChoiceOutput, Incomplete};

/// Every choice of a completion as it appears, each followed by its own task (made by
/// `follow`), and the tasks' results as they end: the scaffolding every rule decides over.
/// [`next`](Self::next) is cancel-safe, so a rule selects on it beside its timers.
pub(crate) struct Following<T, F> {
    choices: Choices,
    follow: F,
    tasks: JoinSet<T>,
    listed: bool,
    seen: usize,
}

impl<T, F, Fut> Following<T, F>
where
    T: Send + 'static,
    F: FnMut(Choice) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    pub(crate) fn new(completions: &Completions, follow: F) -> Self {
        Self {
            choices: completions.choices(),
            follow,
            tasks: JoinSet::new(),
            listed: false,
            seen: 0,
        }
    }

    /// The next follower's result; `None` once every choice has appeared and been followed
    /// to its end. A follower that panicked is passed over.
    pub(crate) async fn next(&mut self) -> Option<T> {
        loop {
            if self.listed && self.tasks.is_empty() {
                return None;
            }
            tokio::select! {
                next = self.choices.next(), if !self.listed => match next {
                    Some(choice) => {
                        self.seen += 1;
                        self.tasks.spawn((self.follow)(choice));
                    }
                    None => self.listed = true,
                },
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Ok(result) = joined {
                        return Some(result);
                    }
                }
            }
        }
    }

    /// Choices that have appeared so far.
    pub(crate) fn seen(&self) -> usize {
        self.seen
    }

    /// Whether every choice has appeared (the completion's stream of choices ended).
    pub(crate) fn listed(&self) -> bool {
        self.listed
    }
}

/// Watches every choice's message as it settles, calling `decide` with each; stops when
/// `decide` returns `true`, the deadline passes (returns `true` then) or every choice is in.
pub(super) async fn watch(
    completions: &Completions,
    deadline: Option<Duration>,
    mut decide: impl FnMut(Result<ChoiceOutput, Incomplete<ChoiceOutput>>, usize, bool) -> bool,
) -> bool {
    let sleep = tokio::time::sleep(deadline.unwrap_or(Duration::MAX));
    tokio::pin!(sleep);
    let mut following = Following::new(completions, |choice| async move { choice.message().await });
    loop {
        tokio::select! {
            next = following.next() => match next {
                Some(result) => {
                    if decide(result, following.seen(), following.listed()) {
                        return false;
                    }
                }
                None => return false,
            },
            () = &mut sleep, if deadline.is_some() => return true,
        }
    }
}

/// The replacements of failed samples that a vote places itself
/// ([`pick_starts_replacements`](Completions::pick_starts_replacements)): one for each
/// failed sample it sees while the readers have reserved one that no earlier failure took.
/// A windowed vote places every replacement, those reserved before it began too (a reader
/// started those at the next position, which is where the vote puts them); a
/// confidence-guided vote only those reserved after it began (one started before it is
/// followed as an ordinary sample, not as one of the warmup).
pub(crate) struct Replacing<'a> {
    completions: &'a Completions,
    /// Reserved replacements this vote does not place.
    skipped: usize,
    replaced: std::collections::HashSet<u32>,
}

impl<'a> Replacing<'a> {
    /// From now on `completions`' reserved replacements are the vote's to start; with
    /// `earlier`, those already reserved too.
    pub(crate) fn new(completions: &'a Completions, earlier: bool) -> Self {
        completions.pick_starts_replacements();
        Replacing {
            completions,
            skipped: match earlier {
                true => 0,
                false => completions.replacements_reserved(),
            },
            replaced: std::collections::HashSet::new(),
        }
    }

    /// Whether the choice `index`, which ended `failed` or not, is replaced: a reserved
    /// replacement is left for it (the caller starts it). Counted once per choice.
    pub(crate) fn take(&mut self, index: u32, failed: bool) -> bool {
        let due = failed
            && !self.replaced.contains(&index)
            && self.completions.replacements_reserved() > self.skipped + self.replaced.len();
        if due {
            self.replaced.insert(index);
        }
        due
    }

    /// Whether the choice `index` was replaced.
    pub(crate) fn replaced(&self, index: u32) -> bool {
        self.replaced.contains(&index)
    }

    /// The choices replaced.
    pub(crate) fn all(&self) -> &std::collections::HashSet<u32> {
        &self.replaced
    }
}

/// Each choice's place in the order the stream finished the choices (`0` first), as a vote
/// counts it: the readers record a choice's place before its finish reaches its actor, so
/// a settled choice that finished has one. A choice that settled well without a routed
/// finish (none known today) is placed after every routed one, in the order it was asked.
pub(crate) struct Places<'a> {
    completions: &'a Completions,
    unrouted: u64,
    asked: std::collections::HashMap<u32, u64>,
}

impl<'a> Places<'a> {
    pub(crate) fn new(completions: &'a Completions) -> Self {
        Places {
            completions,
            unrouted: u64::MAX / 2,
            asked: std::collections::HashMap::new(),
        }
    }

    /// The place of the choice `index`.
    pub(crate) fn of(&mut self, index: u32) -> u64 {
        if let Some(place) = self.asked.get(&index) {
            return *place;
        }
        let place = self.completions.finish_place(index).unwrap_or_else(|| {
            self.unrouted += 1;
            self.unrouted
        });
        self.asked.insert(index, place);
        place
    }
}

/// The choices that qualified for a first-* pick, released in the order the stream finished
/// them: a qualified choice goes out once every choice that finished before it has settled
/// (and did not qualify), so the first to finish is the first selected on every run over the
/// same input, whichever choice's actor ran first.
pub(crate) struct InFinishOrder<'a> {
    completions: &'a Completions,
    /// The next place of the finish order to release.
    next: usize,
    settled: std::collections::HashSet<u32>,
    qualified: std::collections::HashSet<u32>,
}

impl<'a> InFinishOrder<'a> {
    pub(crate) fn new(completions: &'a Completions) -> Self {
        InFinishOrder {
            completions,
            next: 0,
            settled: std::collections::HashSet::new(),
            qualified: std::collections::HashSet::new(),
        }
    }

    /// The choice `index` settled, qualified or not; returns the choices released now, in
    /// finish order.
    pub(crate) fn settled(&mut self, index: u32, qualified: bool) -> Vec<u32> {
        self.settled.insert(index);
        if qualified {
            if self.completions.finish_place(index).is_none() {
                return vec![index]; // No place: released as it came.
            }
            self.qualified.insert(index);
        }
        let mut released = Vec::new();
        for finished in self.completions.finished_from(self.next) {
            if !self.settled.contains(&finished) {
                break;
            }
            self.next += 1;
            if self.qualified.remove(&finished) {
                released.push(finished);
            }
        }
        released
    }

    /// The qualified choices still held (every choice is in, or the pick stops waiting), in
    /// finish order.
    pub(crate) fn rest(&mut self) -> Vec<u32> {
        let mut rest: Vec<u32> = self.qualified.drain().collect();
        rest.sort_by_key(|i| self.completions.finish_place(*i).unwrap_or(u64::MAX));
        rest
    }
}
