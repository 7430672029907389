//! State shared between the actors (the only writers) and the handles (readers).
//!
//! Each choice has an append-only event log behind a mutex. A reader holds a cursor into the
//! log, so every sub-stream replays from the start and reads at its own pace: the writer never
//! waits for a reader, and memory is the size of the response however slowly anyone reads.
//! Waiting readers park a [`Waker`] in a slot of their own; an append wakes the parked ones.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::task::{Context, Poll};

use crate::config::Config;
use crate::error::{Error, ErrorDetail};
use crate::event::Warning;
use crate::lifecycle::{ChoiceState, assemble};
use crate::response::{ChatCompletion, ChoiceSource};
use crate::split::{Batch, Meta};
use crate::usage::Usage;
use crate::waiters::Waiters;

/// Locks a mutex, recovering the data if a writer panicked while holding it: every writer
/// leaves the state consistent between statements, and a panic is reported as an error by
/// the actor's guard anyway.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Something readers can wait on.
pub(crate) trait Watched: Send + Sync + 'static {
    type State;
    fn state(&self) -> &Mutex<Self::State>;
    fn waiters(state: &mut Self::State) -> &mut Waiters;
}

/// A reader's registration: its waker slot, released on drop.
pub(crate) struct Subscription<W: Watched> {
    pub target: Arc<W>,
    id: usize,
}

impl<W: Watched> Subscription<W> {
    pub fn new(target: Arc<W>) -> Self {
        let id = W::waiters(&mut lock(target.state())).register();
        Subscription { target, id }
    }

    /// Runs `f` on the locked state; if it returns `Pending`, parks the waker first.
    pub fn poll_with<T>(
        &self,
        cx: &mut Context<'_>,
        f: impl FnOnce(&mut W::State) -> Poll<T>,
    ) -> Poll<T> {
        let mut state = lock(self.target.state());
        let result = f(&mut state);
        if result.is_pending() {
            W::waiters(&mut state).park(self.id, cx.waker());
        }
        result
    }

    /// Waits until `f` returns `Ready`.
    pub async fn wait<T>(&self, mut f: impl FnMut(&mut W::State) -> Poll<T>) -> T {
        std::future::poll_fn(|cx| self.poll_with(cx, &mut f)).await
    }
}

impl<W: Watched> Drop for Subscription<W> {
    fn drop(&mut self) {
        W::waiters(&mut lock(self.target.state())).unregister(self.id);
    }
}

/// One choice: its merged state and its event log.
#[derive(Debug)]
pub(crate) struct ChoiceShared {
    /// The choice's index in the completion (in a fan-out, numbered across the upstreams).
    pub index: u32,
    state: Mutex<ChoiceState>,
    /// The reader of the choice's upstream, told when the choice is cancelled.
    pub upstream: Arc<UpstreamSignal>,
    /// Batches the reader has routed to the choice (applied by itself or queued for the
    /// choice's actor): a cancel takes effect once these are handled, so that it never drops
    /// an update received before it. Written by the reader alone, without the lock, which an
    /// actor may hold for a long merge.
    routed: AtomicU64,
}

impl ChoiceShared {
    pub fn new(index: u32, max_tool_calls: usize, upstream: Arc<UpstreamSignal>) -> Self {
        ChoiceShared {
            index,
            state: Mutex::new(ChoiceState::new(index, max_tool_calls)),
            upstream,
            routed: AtomicU64::new(0),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, ChoiceState> {
        lock(&self.state)
    }

    /// An emptied batch of the choice's to fill again (see [`BatchPool`](crate::split::BatchPool)),
    /// if one was handed back and the choice's lock is free: the reader never waits for a
    /// merging actor.
    pub fn spare_batch(&self) -> Option<Batch> {
        match self.state.try_lock() {
            Ok(mut state) => state.spare.take(),
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner().spare.take(),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The reader routes batch number `seq` to the choice.
    pub fn routing(&self, seq: u64) {
        self.routed.store(seq, Ordering::Release);
    }

    /// Cancels the choice after the batches routed to it so far (see
    /// [`ChoiceState::cancel_after`]); whether it was open.
    pub fn cancel(&self) -> bool {
        let routed = self.routed.load(Ordering::Acquire);
        self.lock().cancel_after(routed)
    }
}

impl Watched for ChoiceShared {
    type State = ChoiceState;
    fn state(&self) -> &Mutex<ChoiceState> {
        &self.state
    }
    fn waiters(state: &mut ChoiceState) -> &mut Waiters {
        &mut state.waiters
    }
}

/// Tells an upstream's reader that one of its choices was cancelled, so that it can check
/// whether any choice it serves is still wanted (and drop the upstream if none is).
#[derive(Debug, Default)]
pub(crate) struct UpstreamSignal {
    notify: tokio::sync::Notify,
    cancelled: AtomicBool,
}

impl UpstreamSignal {
    /// A choice of this upstream was cancelled.
    pub fn cancelled_one(&self) {
        self.cancelled.store(true, Ordering::Release);
        // One stored permit: a cancel while the reader is busy is seen at its next wait.
        self.notify.notify_one();
    }

    /// Whether any choice of this upstream was cancelled.
    pub fn any_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Resolves at the next cancel (or at once if one came since the last wait).
    pub async fn cancelled(&self) {
        self.notify.notified().await
    }
}

/// How an upstream's choice indexes become the completion's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Indexing {
    /// A single upstream: the indexes as sent.
    AsSent,
    /// Upstream with `n` known, after `offset` choices of the upstreams before it: choice
    /// `i < n` is `offset + i`; any other is numbered as first seen.
    Block { offset: u32, n: u32 },
    /// Numbered in the order first seen, after every block.
    FirstSeen,
}

/// One upstream of the completion, as the completion sees it.
#[derive(Debug)]
pub(crate) struct UpstreamState {
    pub indexing: Indexing,
    /// Its choices: index as sent → index in the completion.
    pub map: std::collections::BTreeMap<u32, u32>,
    /// Its facts (id, model, usage), once it ended.
    pub meta: Meta,
    /// How it ended.
    pub end: Option<Result<(), Error>>,
    /// It was dropped early because no choice it serves was wanted any more.
    pub dropped: bool,
    /// The request it answers, when given apart from the completion's (for estimates).
    pub request: Option<Arc<serde_json::Value>>,
}

impl UpstreamState {
    /// The completion's index of this upstream's choice `local`, if it has one: by the
    /// upstream's numbering, or as numbered in first-seen order (in `map`).
    pub fn global_of(&self, local: u32) -> Option<u32> {
        match self.indexing {
            Indexing::AsSent => Some(local),
            Indexing::Block { offset, n } if local < n => Some(offset + local),
            _ => self.map.get(&local).copied(),
        }
    }

    /// The usage it reported; zero when it failed before its stream began (see
    /// [`ErrorDetail::Open`](crate::ErrorDetail::Open)): a refused request used no tokens.
    pub fn reported_usage(&self) -> Option<Usage> {
        let never_opened =
            matches!(&self.end, Some(Err(e)) if e.kind() == crate::error::ErrorKind::Open);
        match never_opened {
            true => Some(Usage::sum(Vec::new())),
            false => self.meta.usage.usage(),
        }
    }

    pub fn new(indexing: Indexing) -> Self {
        UpstreamState {
            indexing,
            map: Default::default(),
            meta: Meta::default(),
            end: None,
            dropped: false,
            request: None,
        }
    }
}

/// The whole completion.
#[derive(Debug)]
pub(crate) struct CompletionShared {
    pub config: Config,
    state: Mutex<CompletionState>,
    /// Every handle is gone: actors stop without finishing their work.
    pub cancelled: AtomicBool,
    /// [`Completions::cancel`](crate::Completions::cancel) was called: every open choice and
    /// every choice still to appear is cancelled, and each upstream is dropped as soon as
    /// its finishing choices are in.
    pub closing: AtomicBool,
    /// One per upstream, in order: wakes its reader when a choice of it is cancelled.
    pub signals: Vec<Arc<UpstreamSignal>>,
    /// The usage, once computed (counting an estimate is done once).
    pub usage: tokio::sync::OnceCell<Usage>,
}

#[derive(Debug, Default)]
pub(crate) struct CompletionState {
    /// In order of first appearance.
    pub choices: Vec<Arc<ChoiceShared>>,
    pub warnings: Vec<Warning>,
    pub meta: Meta,
    /// Set when every reader is done: no more choices will appear.
    pub end: Option<Result<(), Error>>,
    pub waiters: Waiters,
    /// Every upstream, in the order given (one unless fanned out).
    pub upstreams: Vec<UpstreamState>,
    /// Built by a fan-out: indexes are renumbered and errors name their upstream.
    pub fan_out: bool,
    /// The next index given to a choice numbered in first-seen order.
    pub next_index: u32,
}

impl CompletionState {
    /// The completion's index of upstream `k`'s choice `local` (numbering it if new).
    pub fn global_index(&mut self, k: usize, local: u32) -> u32 {
        let upstream = &self.upstreams[k];
        if let Some(&global) = upstream.map.get(&local) {
            return global;
        }
        let global = match upstream.global_of(local) {
            Some(global) => global,
            None => {
                let next = self.next_index;
                self.next_index = self.next_index.saturating_add(1);
                next
            }
        };
        // A fan-out lists each upstream's choices (its usage parts); a single stream
        // numbered as sent needs no map.
        if self.fan_out || global != local {
            self.upstreams[k].map.insert(local, global);
        }
        global
    }

    /// Where the completion's choice `global` came from: its upstream, with that upstream's
    /// id and model.
    pub fn source_of(&self, global: u32) -> Option<ChoiceSource> {
        let (k, upstream) = self.upstreams.iter().enumerate().find(|(_, u)| {
            u.map.values().any(|&g| g == global)
                || matches!(u.indexing, Indexing::Block { offset, n } if (offset..offset.saturating_add(n)).contains(&global))
        })?;
        Some(ChoiceSource {
            upstream: k,
            id: upstream.meta.id.clone(),
            model: upstream.meta.model.clone(),
        })
    }

    /// The error that ended upstream `k`, as its choices and the completion report it.
    pub fn upstream_error(&self, k: usize, error: Error) -> Error {
        if self.fan_out {
            Error::from(ErrorDetail::UpstreamFailed { upstream: k, error })
        } else {
            error
        }
    }

    /// Records how upstream `k` ended (`outcome` already as its choices see it); once every
    /// upstream has ended, the completion's end: the first upstream's error, else `Ok`.
    pub fn end_upstream(&mut self, k: usize, meta: Meta, outcome: Result<(), Error>) {
        let upstream = &mut self.upstreams[k];
        if upstream.end.is_some() {
            return;
        }
        if !self.fan_out || self.meta.id.is_none() {
            let model = self.meta.model.take();
            self.meta = meta.clone();
            self.meta.model = self.meta.model.take().or(model);
        }
        upstream.meta = meta;
        upstream.end = Some(outcome);
        if self.upstreams.iter().all(|u| u.end.is_some()) {
            let end = self
                .upstreams
                .iter()
                .find_map(|u| u.end.clone().filter(Result::is_err))
                .unwrap_or(Ok(()));
            self.end = Some(end);
        }
        self.waiters.wake_all();
    }

    /// Each choice's completion tokens as the upstreams reported them, by the completion's
    /// index.
    pub fn reported_per_choice(&self) -> std::collections::BTreeMap<u32, u64> {
        if !self.fan_out {
            return self.meta.usage.per_choice();
        }
        let mut all = std::collections::BTreeMap::new();
        for u in &self.upstreams {
            for (local, tokens) in u.meta.usage.per_choice() {
                if let Some(global) = u.global_of(local) {
                    all.insert(global, tokens);
                }
            }
        }
        all
    }

    /// The usage every upstream reported, summed; `None` if any reported none.
    pub fn reported_usage(&self) -> Option<Usage> {
        if !self.fan_out {
            return self.meta.usage.usage();
        }
        let parts: Option<Vec<Usage>> = self
            .upstreams
            .iter()
            .map(UpstreamState::reported_usage)
            .collect();
        parts.map(Usage::sum)
    }
}

impl CompletionShared {
    pub fn new(config: Config) -> Self {
        CompletionShared::with_upstreams(config, vec![Indexing::AsSent], false)
    }

    /// A completion fed by these upstreams (their readers are started by the caller).
    pub fn with_upstreams(config: Config, indexing: Vec<Indexing>, fan_out: bool) -> Self {
        let next_index = indexing
            .iter()
            .map(|i| match i {
                Indexing::Block { offset, n } => offset.saturating_add(*n),
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        let signals = indexing.iter().map(|_| Arc::default()).collect();
        let state = CompletionState {
            upstreams: indexing.into_iter().map(UpstreamState::new).collect(),
            fan_out,
            next_index,
            ..CompletionState::default()
        };
        CompletionShared {
            config,
            state: Mutex::new(state),
            cancelled: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            signals,
            usage: tokio::sync::OnceCell::new(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, CompletionState> {
        lock(&self.state)
    }

    /// The model to count with: the builder's, the request's, or the stream's.
    pub fn model(&self) -> Option<String> {
        self.config
            .model
            .clone()
            .or_else(|| {
                let request = self.config.request.as_deref()?;
                request.get("model")?.as_str().map(str::to_string)
            })
            .or_else(|| self.lock().meta.model.clone())
    }

    /// Cancels every open choice and every choice still to appear, and wakes every reader;
    /// returns the indexes cancelled now, including the declared choices of a fan-out that
    /// have not appeared (their reader lists them as cancelled when it drops its upstream).
    pub fn close(&self) -> Vec<u32> {
        self.closing.store(true, Ordering::Release);
        let (choices, mut unseen) = {
            let state = self.lock();
            // Not yet published: a reader numbers a new choice, then publishes it under a
            // second lock; it cancels it then, since the completion is closing.
            let published: std::collections::HashSet<u32> =
                state.choices.iter().map(|c| c.index).collect();
            let unseen: Vec<u32> = state
                .upstreams
                .iter()
                .filter(|u| u.end.is_none())
                .flat_map(|u| match u.indexing {
                    Indexing::Block { offset, n } => (offset..offset.saturating_add(n))
                        .filter(|index| !published.contains(index))
                        .collect(),
                    _ => Vec::new(),
                })
                .collect();
            (state.choices.clone(), unseen)
        };
        let mut cancelled: Vec<u32> = choices
            .iter()
            .filter(|c| c.cancel())
            .map(|c| c.index)
            .collect();
        cancelled.append(&mut unseen);
        for signal in &self.signals {
            signal.cancelled_one();
        }
        cancelled
    }

    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
    }

    /// Assembles the completion from the settled choices; the first error met, if any. The
    /// usage is left out: it may need counting (see `Completions::usage`).
    pub fn assemble(&self) -> (ChatCompletion, Option<Error>) {
        let (choices, meta, end) = {
            let state = self.lock();
            (state.choices.clone(), state.meta.clone(), state.end.clone())
        };
        let per_choice = self.lock().reported_per_choice();
        let outcomes = choices.iter().map(|c| c.lock().outcome());
        let (mut completion, error) = assemble(meta, &per_choice, end.as_ref(), outcomes);
        let state = self.lock();
        if state.fan_out {
            for choice in &mut completion.choices {
                choice.source = state.source_of(choice.index);
            }
        }
        (completion, error)
    }
}

impl Watched for CompletionShared {
    type State = CompletionState;
    fn state(&self) -> &Mutex<CompletionState> {
        &self.state
    }
    fn waiters(state: &mut CompletionState) -> &mut Waiters {
        &mut state.waiters
    }
}

/// Live actors of this crate in the process (a diagnostic for leak tests).
pub(crate) static LIVE_ACTORS: AtomicUsize = AtomicUsize::new(0);

/// Actors of this crate started in the process so far.
pub(crate) static ACTORS_STARTED: AtomicUsize = AtomicUsize::new(0);

/// Counts one live actor for as long as it is held.
#[derive(Debug)]
pub(crate) struct LiveActor(());

impl LiveActor {
    pub fn new() -> Self {
        LIVE_ACTORS.fetch_add(1, Ordering::AcqRel);
        ACTORS_STARTED.fetch_add(1, Ordering::Relaxed);
        LiveActor(())
    }
}

impl Drop for LiveActor {
    fn drop(&mut self) {
        LIVE_ACTORS.fetch_sub(1, Ordering::AcqRel);
    }
}
