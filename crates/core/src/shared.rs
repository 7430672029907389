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
use crate::event::{ChoiceEvent, Warning, WarningKind};
use crate::event_log::EventLog;
use crate::merge::{ChoiceAccumulator, ChoiceUpdate};
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

/// Where a choice is in its life. Every transition is a method of [`ChoiceState`].
///
/// ```text
/// Open ──finish / clean end──▶ Closed ──late update breaks a limit──▶ Closed { late_error }
///   └──own bad update / stream error / actor failure──▶ Failed
/// ```
#[derive(Debug, Clone)]
pub(crate) enum Phase {
    /// Taking updates; the sub-streams are open.
    Open,
    /// The sub-streams ended `Ok`: at the choice's finish, or at a clean end of the stream.
    /// Updates after the finish still merge into the message (and are warned about); an
    /// error one of them causes is kept for `message()` and `collect()`.
    Closed { late_error: Option<Error> },
    /// Ended with an error, its own or the stream's before its finish: the sub-streams end
    /// with it, and the choice's later updates are ignored (counted in a warning).
    Failed(Error),
}

#[derive(Debug)]
pub(crate) struct ChoiceState {
    pub acc: ChoiceAccumulator,
    pub events: EventLog,
    pub phase: Phase,
    /// The stream is over for this choice: no more writes will come.
    pub settled: bool,
    /// Batches applied (or ignored) so far. Each batch carries its number, so that the
    /// choice's successive actors (one retires while the upstream is quiet, the next
    /// update starts another) apply them in order.
    pub applied: u64,
    /// Updates ignored because the choice had failed, and the line of the first.
    pub ignored: (u64, u64),
    pub waiters: Waiters,
}

impl ChoiceState {
    pub fn new(index: u32, max_tool_calls: usize) -> Self {
        ChoiceState {
            acc: ChoiceAccumulator::new(index, max_tool_calls),
            events: EventLog::default(),
            phase: Phase::Open,
            settled: false,
            applied: 0,
            ignored: (0, 0),
            waiters: Waiters::default(),
        }
    }

    /// How the sub-streams ended, once they have.
    pub fn closed(&self) -> Option<Result<(), Error>> {
        match &self.phase {
            Phase::Open => None,
            Phase::Closed { .. } => Some(Ok(())),
            Phase::Failed(e) => Some(Err(e.clone())),
        }
    }

    /// Whether the choice still merges updates.
    fn takes_updates(&self) -> bool {
        !self.settled && matches!(self.phase, Phase::Open | Phase::Closed { late_error: None })
    }

    /// Whether batch number `seq` is next (the earlier ones are applied), or the choice no
    /// longer takes updates (then the batch is only counted).
    pub fn turn_of(&self, seq: u64) -> bool {
        self.applied + 1 >= seq || !self.takes_updates()
    }

    /// Applies one batch (parsed by the choice's actor), appending its events to the log;
    /// `decoded` is the batch's parse error, if any, after the updates before it.
    /// Warnings go to `warnings`, for the completion.
    pub fn apply(
        &mut self,
        updates: Vec<ChoiceUpdate>,
        decoded: Result<(), crate::decode::DecodeError>,
        buf: &mut Vec<ChoiceEvent>,
        warnings: &mut Vec<Warning>,
    ) {
        self.applied += 1;
        if !self.takes_updates() {
            let undecoded = match &decoded {
                Ok(()) => 0,
                Err(d) => 1 + d.after,
            };
            let line = updates.first().map(|u| u.line);
            self.ignore(updates.len() as u64 + undecoded, line);
            return;
        }
        for update in updates {
            let was_finished = self.acc.is_finished();
            let result = self.acc.apply(update, buf);
            warnings.extend(buf.iter().filter_map(|e| match e {
                ChoiceEvent::Warning(w) => Some(w.clone()),
                _ => None,
            }));
            if was_finished {
                // The sub-streams ended at the finish: late data goes to the message and the
                // completion's warnings only.
                buf.clear();
            } else {
                self.events.append(buf);
                if self.acc.is_finished() {
                    self.phase = Phase::Closed { late_error: None };
                }
            }
            if let Err(e) = result {
                self.fail(e);
                break;
            }
        }
        if let Err(d) = decoded {
            self.fail(d.error);
            self.ignore(d.after, Some(d.after_line));
        }
        self.waiters.wake_all();
    }

    /// Counts updates ignored after the choice failed (`line`: the first one's, if known).
    fn ignore(&mut self, updates: u64, line: Option<u64>) {
        let (count, first) = &mut self.ignored;
        if updates == 0 {
            return;
        }
        if *count == 0 {
            *first = line.unwrap_or(0);
        }
        *count += updates;
    }

    /// The choice's own update (or its actor) failed: ends the sub-streams with the error, or,
    /// if they had already ended at the finish, keeps it as the late error.
    pub fn fail(&mut self, error: Error) {
        match &mut self.phase {
            Phase::Open => self.phase = Phase::Failed(error),
            Phase::Closed { late_error } => {
                late_error.get_or_insert(error);
            }
            Phase::Failed(_) => {}
        }
        self.waiters.wake_all();
    }

    /// The stream is over for this choice (`outcome`: how it ended): closes the sub-streams
    /// if they are open, and settles the choice. Returns a warning when updates were
    /// ignored after the choice failed.
    pub fn settle(&mut self, index: u32, outcome: Result<(), Error>) -> Option<Warning> {
        if self.settled {
            return None;
        }
        if let Phase::Open = self.phase {
            self.phase = match outcome {
                Ok(()) => Phase::Closed { late_error: None },
                Err(e) => Phase::Failed(e),
            };
        }
        self.settled = true;
        self.waiters.wake_all();
        let (updates, line) = self.ignored;
        (updates > 0).then_some(Warning {
            choice: Some(index),
            line,
            kind: WarningKind::IgnoredAfterFailure { updates },
        })
    }
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

    /// The assembled choice and the error that ended it, if any.
    pub fn outcome(state: &ChoiceState) -> (ChoiceOutput, Option<Error>) {
        let error = match &state.phase {
            Phase::Open => None,
            Phase::Closed { late_error } => late_error.clone(),
            Phase::Failed(e) => Some(e.clone()),
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
        let (choices, meta, end) = {
            let state = self.lock();
            (state.choices.clone(), state.meta.clone(), state.end.clone())
        };
        let outcomes = choices.iter().map(|c| ChoiceShared::outcome(&c.lock()));
        assemble(meta, end.as_ref(), outcomes)
    }
}

/// The completion from its facts, the stream's end and every choice's outcome (in order of
/// first appearance); the error reported is the stream's, else the first choice's.
pub(crate) fn assemble(
    meta: Meta,
    end: Option<&Result<(), Error>>,
    outcomes: impl Iterator<Item = (ChoiceOutput, Option<Error>)>,
) -> (ChatCompletion, Option<Error>) {
    let mut error = match end {
        Some(Err(e)) => Some(e.clone()),
        _ => None,
    };
    let mut outputs = Vec::new();
    for (output, choice_error) in outcomes {
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
