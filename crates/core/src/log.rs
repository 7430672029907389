//! What a choice publishes: its append-only event log and its phase, written by the choice's
//! one owner (its actor; the reader only for a choice whose actor is gone) and read by any
//! number of handles, each at its own pace.
//!
//! A reader holds a cursor into the log, so every sub-stream replays from the start: the
//! writer never waits for a reader, and memory is the size of the response however slowly
//! anyone reads. Waiting readers park a [`Waker`](std::task::Waker) in a slot of their own;
//! a publish wakes the parked ones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use choicewise_proto::__private::{Closed, EventLog, Phase, output_from_events};
use choicewise_proto::{ChoiceEvent, ChoiceOutput, Error};

use crate::waiters::Waiters;

/// Locks a mutex, recovering the data if a writer panicked while holding it: every writer
/// leaves the state consistent between statements.
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

/// One choice as its handles see it.
#[derive(Debug)]
pub(crate) struct ChoiceLog {
    /// The choice's index in the completion (in a fan-out, numbered across the upstreams).
    pub index: u32,
    /// A cancel of the choice was asked for (it takes effect in the choice's actor).
    cancel_asked: AtomicBool,
    /// The confidence rule stopped the choice (set before its cancel is asked for).
    low_confidence: AtomicBool,
    published: Mutex<Published>,
}

/// What the choice's owner published.
#[derive(Debug)]
pub(crate) struct Published {
    pub events: EventLog,
    /// Where the choice is, as of the last publish.
    pub phase: Phase,
    /// The message, published when the choice closes and again when it settles.
    output: Option<ChoiceOutput>,
    pub waiters: Waiters,
}

impl Published {
    /// How the sub-streams ended, once they have.
    pub fn closed(&self) -> Option<Result<(), Error>> {
        self.phase.closed().map(Closed::result)
    }

    /// The choice's message and the error that ended it, as published; while it is open,
    /// the message so far, rebuilt from its events.
    pub fn outcome(&self, index: u32) -> (ChoiceOutput, Option<Error>) {
        let output = match &self.output {
            Some(output) => output.clone(),
            None => self.rebuilt(index),
        };
        (output, self.phase.closed().and_then(Closed::error))
    }

    /// The message as the events tell it.
    pub fn rebuilt(&self, index: u32) -> ChoiceOutput {
        output_from_events(index, (0..).map_while(|i| self.events.get(i)))
    }
}

/// Tells apart the phases a reader must learn of.
fn key(phase: &Phase) -> (bool, u8) {
    let closed = |c: &Closed| match c {
        Closed::Ended { late_error: None } => 1,
        Closed::Ended {
            late_error: Some(_),
        } => 2,
        Closed::Failed(_) => 3,
        Closed::Cancelled => 4,
    };
    match phase {
        Phase::Open => (false, 0),
        Phase::Closed(c) => (false, closed(c)),
        Phase::Settled(c) => (true, closed(c)),
    }
}

impl ChoiceLog {
    pub fn new(index: u32) -> Self {
        ChoiceLog {
            index,
            cancel_asked: AtomicBool::new(false),
            low_confidence: AtomicBool::new(false),
            published: Mutex::new(Published {
                events: EventLog::default(),
                phase: Phase::Open,
                output: None,
                waiters: Waiters::default(),
            }),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Published> {
        lock(&self.published)
    }

    /// Appends events and the phase they led to; `output` (the message) once the choice has
    /// closed. Wakes the readers.
    pub fn publish(
        &self,
        events: &mut Vec<ChoiceEvent>,
        phase: &Phase,
        output: impl FnOnce() -> Option<ChoiceOutput>,
    ) {
        let mut published = self.lock();
        published.events.append(events);
        if key(&published.phase) != key(phase) {
            published.phase = phase.clone();
            if let Some(output) = output() {
                published.output = Some(output);
            }
        }
        published.waiters.wake_all();
    }

    /// Records a request to cancel; `false` if one was already asked for or the choice has
    /// closed.
    pub fn ask_cancel(&self) -> bool {
        if self.lock().phase.closed().is_some() {
            return false;
        }
        !self.cancel_asked.swap(true, Ordering::AcqRel)
    }
}

impl ChoiceLog {
    /// Records that the confidence rule stopped the choice.
    pub fn mark_low_confidence(&self) {
        self.low_confidence.store(true, Ordering::Release);
    }

    /// Whether the confidence rule stopped the choice.
    pub fn is_low_confidence(&self) -> bool {
        self.low_confidence.load(Ordering::Acquire)
    }
}

impl Watched for ChoiceLog {
    type State = Published;
    fn state(&self) -> &Mutex<Published> {
        &self.published
    }
    fn waiters(state: &mut Published) -> &mut Waiters {
        &mut state.waiters
    }
}
