//! State shared between the actors (the only writers) and the handles (readers).
//!
//! Each choice has an append-only event log behind a mutex. A reader holds a cursor into the
//! log, so every sub-stream replays from the start and reads at its own pace: the writer never
//! waits for a reader, and memory is the size of the response however slowly anyone reads.
//! Waiting readers park a [`Waker`] in a slot of their own; an append wakes the parked ones.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use serde_json::Value;

use crate::config::Config;
use crate::error::Error;
use crate::event::Warning;
use crate::event_log::EventLog;
use crate::merge::ChoiceAccumulator;
use crate::response::{ChatCompletion, ChoiceOutput};
use crate::usage::{ReportedUsage, Usage};

/// Locks a mutex, recovering the data if a writer panicked while holding it: every writer
/// leaves the state consistent between statements, and a panic is reported as an error by
/// the actor's guard anyway.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Parked wakers, one slot per reader.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Waiters {
    pub fn register(&mut self) -> usize {
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        }
    }

    pub fn unregister(&mut self, id: usize) {
        if let Some(slot) = self.slots.get_mut(id) {
            *slot = None;
            self.free.push(id);
        }
    }

    pub fn park(&mut self, id: usize, waker: &Waker) {
        if let Some(slot) = self.slots.get_mut(id) {
            match slot {
                Some(w) if w.will_wake(waker) => {}
                _ => *slot = Some(waker.clone()),
            }
        }
    }

    pub fn wake_all(&mut self) {
        for slot in &mut self.slots {
            if let Some(w) = slot.take() {
                w.wake();
            }
        }
    }
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

#[derive(Debug)]
pub(crate) struct ChoiceState {
    pub acc: ChoiceAccumulator,
    pub events: EventLog,
    /// Set when the sub-streams end: `Ok` at the choice's finish (or a clean end of the stream),
    /// `Err` when the stream failed before the choice finished.
    pub closed: Option<Result<(), Error>>,
    /// Set when no more writes will come (the stream is over for this choice).
    pub settled: bool,
    /// A choice actor exists for this choice (set by the reader when it spawns one, cleared
    /// when the actor's state drops). While it is set, only that actor writes here.
    pub attached: bool,
    /// The reader retired the attached actor after the upstream went quiet: it applies what
    /// it has queued and stops without ending the choice; the next update spawns a new one.
    pub retired: bool,
    /// An error met after the sub-streams had already closed `Ok` at the finish (late data
    /// that broke a limit): reported by `message()` and `collect()`, never dropped.
    pub late_error: Option<Error>,
    pub waiters: Waiters,
}

impl ChoiceState {
    /// Ends the sub-streams (once).
    pub fn close(&mut self, outcome: Result<(), Error>) {
        if self.closed.is_none() {
            self.closed = Some(outcome);
        }
    }

    /// Whether the choice takes no more updates: it is settled, or its own merge failed (an
    /// error before the choice was settled can only be its own; see `fail`).
    pub fn takes_no_updates(&self) -> bool {
        self.settled || matches!(self.closed, Some(Err(_))) || self.late_error.is_some()
    }

    /// Ends the sub-streams (once) and settles the choice: no more writes will come.
    pub fn settle(&mut self, outcome: Result<(), Error>) {
        if self.closed.is_none() && outcome.is_ok() {
            // A finish kept open for late argument fragments takes effect at the end.
            let mut late = Vec::new();
            self.acc.end_of_stream(&mut late);
            self.events.append(&mut late);
        }
        self.close(outcome);
        self.settled = true;
        self.waiters.wake_all();
    }

    /// The choice's own merge failed: ends the sub-streams with the error, or, if they had
    /// already ended at the finish, keeps it as the late error.
    pub fn fail(&mut self, error: Error) {
        match self.closed {
            None => self.closed = Some(Err(error)),
            Some(_) => {
                self.late_error.get_or_insert(error);
            }
        }
    }
}

impl ChoiceShared {
    pub fn new(index: u32, max_tool_calls: usize) -> Self {
        ChoiceShared {
            index,
            state: Mutex::new(ChoiceState {
                acc: ChoiceAccumulator::new(index, max_tool_calls),
                events: EventLog::default(),
                closed: None,
                settled: false,
                attached: false,
                retired: false,
                late_error: None,
                waiters: Waiters::default(),
            }),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, ChoiceState> {
        lock(&self.state)
    }

    /// The assembled choice and the error that ended it, if any.
    pub fn outcome(state: &ChoiceState) -> (ChoiceOutput, Option<Error>) {
        let error = match &state.closed {
            Some(Err(e)) => Some(e.clone()),
            _ => state.late_error.clone(),
        };
        (state.acc.output(), error)
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

/// Completion-level facts gathered by the reader.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meta {
    pub id: Option<String>,
    pub model: Option<String>,
    pub created: Option<i64>,
    pub system_fingerprint: Option<String>,
    pub service_tier: Option<String>,
    pub prompt_filter_results: Vec<Value>,
    pub usage: ReportedUsage,
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
        let (choices, meta, mut error) = {
            let state = self.lock();
            let error = match &state.end {
                Some(Err(e)) => Some(e.clone()),
                _ => None,
            };
            (state.choices.clone(), state.meta.clone(), error)
        };
        let mut outputs = Vec::with_capacity(choices.len());
        for choice in &choices {
            let (output, choice_error) = ChoiceShared::outcome(&choice.lock());
            if error.is_none() {
                error = choice_error;
            }
            outputs.push(output);
        }
        outputs.sort_by_key(|c| c.index);
        let completion = ChatCompletion {
            id: meta.id.unwrap_or_default(),
            created: meta.created.unwrap_or_default(),
            model: meta.model.unwrap_or_default(),
            system_fingerprint: meta.system_fingerprint,
            service_tier: meta.service_tier,
            choices: outputs,
            usage: None,
            prompt_filter_results: match meta.prompt_filter_results.len() {
                0 => None,
                1 => meta.prompt_filter_results.into_iter().next(),
                _ => Some(Value::Array(meta.prompt_filter_results)),
            },
            ..ChatCompletion::default()
        };
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
