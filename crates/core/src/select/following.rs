//! The scaffolding every rule decides over: a completion's choices as they appear, each
//! followed by a task of its own, and the tasks' results as they end.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::task::JoinSet;

use crate::choice::Choice;
use crate::completions::{Choices, Completions};
use choicewise_proto::ChoiceOutput;

/// What a follower gives: the choice it followed, and what it found.
pub(crate) trait Followed {
    /// The choice's index.
    fn index(&self) -> u32;
}

impl<T> Followed for (u32, T) {
    fn index(&self) -> u32 {
        self.0
    }
}

/// Every choice of a completion as it appears, each followed by its own task (made by
/// `follow`), and the tasks' results as they end: the scaffolding every rule decides over.
/// [`next`](Self::next) is cancel-safe, so a rule selects on it beside its timers.
///
/// With [`in_finish_order`](Self::in_finish_order), the results of the choices the stream
/// finished come in the order the stream finished them (a result waits for those of every
/// choice finished before it), so that a rule sees the same sequence on every run over the
/// same input, whichever choice's actor ran first; a choice that ended without a finish comes
/// as it settles.
pub(crate) struct Following<'a, T, F> {
    completions: &'a Completions,
    choices: Choices,
    follow: F,
    tasks: JoinSet<T>,
    listed: bool,
    seen: usize,
    order: Option<FinishOrder<'a, T>>,
}

impl<'a, T, F, Fut> Following<'a, T, F>
where
    T: Followed + Send + 'static,
    F: FnMut(Choice) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    pub(crate) fn new(completions: &'a Completions, follow: F) -> Self {
        Self {
            completions,
            choices: completions.choices(),
            follow,
            tasks: JoinSet::new(),
            listed: false,
            seen: 0,
            order: None,
        }
    }

    /// The results in the order the stream finished the choices.
    pub(crate) fn in_finish_order(mut self) -> Self {
        self.order = Some(FinishOrder::new(self.completions));
        self
    }

    /// The next follower's result; `None` once every choice has appeared and been followed
    /// to its end. A follower that panicked is passed over.
    pub(crate) async fn next(&mut self) -> Option<T> {
        loop {
            if let Some(ready) = self.order.as_mut().and_then(FinishOrder::pop) {
                return Some(ready);
            }
            if self.listed && self.tasks.is_empty() {
                // Every follower is in: what still waits (behind a choice whose follower
                // panicked) comes in finish order.
                return self.order.as_mut().and_then(FinishOrder::flush);
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
                        match &mut self.order {
                            Some(order) => order.settled(result),
                            None => return Some(result),
                        }
                    }
                }
            }
        }
    }

    /// The results held back for an earlier finish, in finish order (the rule stops
    /// waiting: its deadline passed).
    pub(crate) fn held(&mut self) -> Vec<T> {
        let mut held = Vec::new();
        while let Some(item) = self.order.as_mut().and_then(FinishOrder::flush) {
            held.push(item);
        }
        held
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

/// Watches every choice's message as it settles (shared, not copied; `None` for one that did
/// not finish), calling `decide` with each; stops when
/// `decide` returns `true`, the deadline passes (returns `true` then) or every choice is in.
pub(super) async fn watch(
    completions: &Completions,
    deadline: Option<Duration>,
    mut decide: impl FnMut(Option<Arc<ChoiceOutput>>, usize, bool) -> bool,
) -> bool {
    let sleep = tokio::time::sleep(deadline.unwrap_or(Duration::MAX));
    tokio::pin!(sleep);
    let mut following = Following::new(completions, |choice: Choice| async move {
        (choice.index(), choice.shared_message().await)
    })
    .in_finish_order();
    loop {
        tokio::select! {
            next = following.next() => match next {
                Some((_, result)) => {
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

/// Followers' results in the order the stream finished their choices: a result is released
/// once every choice the stream finished before its own has settled; one whose choice has no
/// place (it ended without a finish) is released as it comes.
struct FinishOrder<'a, T> {
    completions: &'a Completions,
    /// The next place of the finish order to release.
    next: usize,
    /// Results held for an earlier place, by index.
    held: std::collections::HashMap<u32, T>,
    /// Choices settled (released, or held) at places not yet reached.
    settled: std::collections::HashSet<u32>,
    ready: std::collections::VecDeque<T>,
}

impl<'a, T: Followed> FinishOrder<'a, T> {
    fn new(completions: &'a Completions) -> Self {
        FinishOrder {
            completions,
            next: 0,
            held: std::collections::HashMap::new(),
            settled: std::collections::HashSet::new(),
            ready: std::collections::VecDeque::new(),
        }
    }

    /// A follower's result came.
    fn settled(&mut self, item: T) {
        let index = item.index();
        self.settled.insert(index);
        match self.completions.finish_place(index) {
            None => self.ready.push_back(item),
            Some(_) => {
                self.held.insert(index, item);
            }
        }
        for finished in self.completions.finished_from(self.next) {
            if !self.settled.contains(&finished) {
                break;
            }
            self.next += 1;
            if let Some(item) = self.held.remove(&finished) {
                self.ready.push_back(item);
            }
        }
    }

    /// The next result released.
    fn pop(&mut self) -> Option<T> {
        self.ready.pop_front()
    }

    /// The next result, released or held, in finish order.
    fn flush(&mut self) -> Option<T> {
        if let Some(item) = self.ready.pop_front() {
            return Some(item);
        }
        let first = (self.held.keys())
            .min_by_key(|i| self.completions.finish_place(**i).unwrap_or(u64::MAX))
            .copied()?;
        self.held.remove(&first)
    }
}
