//! State shared between the actors (the only writers) and the handles (readers).
//!
//! Each choice has an append-only event log behind a mutex. A reader holds a cursor into the
//! log, so every sub-stream replays from the start and reads at its own pace: the writer never
//! waits for a reader, and memory is the size of the response however slowly anyone reads.
//! Waiting readers park a [`Waker`] in a slot of their own; an append wakes the parked ones.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use crate::config::Config;
use crate::error::Error;
use crate::event::Warning;
use crate::lifecycle::{ChoiceState, assemble};
use crate::response::ChatCompletion;
use crate::split::Meta;
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
    pub index: u32,
    state: Mutex<ChoiceState>,
}

impl ChoiceShared {
    pub fn new(index: u32, max_tool_calls: usize) -> Self {
        ChoiceShared {
            index,
            state: Mutex::new(ChoiceState::new(index, max_tool_calls)),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, ChoiceState> {
        lock(&self.state)
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

/// The whole completion.
#[derive(Debug)]
pub(crate) struct CompletionShared {
    pub config: Config,
    state: Mutex<CompletionState>,
    /// Every handle is gone: actors stop without finishing their work.
    pub cancelled: AtomicBool,
    /// The usage, once computed (counting an estimate is done once).
    pub usage: tokio::sync::OnceCell<Usage>,
}

#[derive(Debug, Default)]
pub(crate) struct CompletionState {
    /// In order of first appearance.
    pub choices: Vec<Arc<ChoiceShared>>,
    pub warnings: Vec<Warning>,
    pub meta: Meta,
    /// Set when the reader is done: no more choices will appear.
    pub end: Option<Result<(), Error>>,
    pub waiters: Waiters,
}

impl CompletionShared {
    pub fn new(config: Config) -> Self {
        CompletionShared {
            config,
            state: Mutex::new(CompletionState::default()),
            cancelled: AtomicBool::new(false),
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
        let outcomes = choices.iter().map(|c| c.lock().outcome());
        assemble(meta, end.as_ref(), outcomes)
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
