//! What a choice publishes: its append-only event log and its phase, written by the choice's
//! one owner (its actor; the reader only for a choice whose actor is gone) and read by any
//! number of handles, each at its own pace.
//!
//! Writing takes a [`LogWriter`]: whoever holds the newest one is the log's one writer. The
//! reader gives each actor it starts a new writer ([`ChoiceLog::take_over`]) and takes one
//! itself when an actor is gone (it panicked, could not start, or dies with the reader);
//! taking over fences off the writer before, whose later writes are refused. A log refuses
//! every write once the choice has settled.
//!
//! A reader holds a cursor into the log, so every sub-stream replays from the start: the
//! writer never waits for a reader, and memory is the size of the response however slowly
//! anyone reads. Waiting readers park a [`Waker`](std::task::Waker) in a slot of their own;
//! a publish wakes the parked ones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use choicewise_proto::driver::{Closed, EventLog, Phase, output_from_events};
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
    published: Mutex<Published>,
}

/// What the choice's owner published.
#[derive(Debug)]
pub(crate) struct Published {
    /// The epoch of the log's current writer (see [`ChoiceLog::take_over`]).
    writer: u64,
    pub events: EventLog,
    /// Where the choice is, as of the last publish.
    pub phase: Phase,
    /// The message, published when the choice closes and again when it settles; shared, so
    /// that a reader holds it without copying it and without holding the lock.
    output: Option<Arc<ChoiceOutput>>,
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
            Some(output) => ChoiceOutput::clone(output),
            None => self.rebuilt(index),
        };
        (output, self.phase.closed().and_then(Closed::error))
    }

    /// The error that ended the choice, once it closed with one.
    pub fn error(&self) -> Option<Error> {
        self.phase.closed().and_then(Closed::error)
    }

    /// The choice's message as published (as [`outcome`](Self::outcome) returns it), shared
    /// rather than copied: read it after the lock is let go.
    pub fn shared_output(&self, index: u32) -> Arc<ChoiceOutput> {
        match &self.output {
            Some(output) => output.clone(),
            None => Arc::new(self.rebuilt(index)),
        }
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
        Closed::Cancelled(_) => 4,
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
            published: Mutex::new(Published {
                writer: 0,
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

    /// Makes the caller the log's one writer: the writer before (if any) is fenced off, its
    /// later writes refused. The reader calls it for each actor it starts, and for itself
    /// when the choice's actor is gone.
    pub fn take_over(self: &Arc<Self>) -> LogWriter {
        let mut published = self.lock();
        published.writer += 1;
        LogWriter {
            log: self.clone(),
            epoch: published.writer,
        }
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

/// The right to write a choice's log, held by its one writer (see [`ChoiceLog::take_over`]).
/// Not `Clone`: a writer is passed on by moving it.
#[derive(Debug)]
pub(crate) struct LogWriter {
    log: Arc<ChoiceLog>,
    epoch: u64,
}

/// Why a log refused a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteRefused {
    /// The choice has settled: its log is final.
    Settled,
    /// Another writer took over (the actor this writer belonged to is gone).
    Fenced,
}

impl LogWriter {
    /// Appends events and the phase they led to; `output` (the message) once the choice has
    /// closed. Wakes the readers. Refused, changing nothing, once the choice has settled or
    /// when another writer has taken over.
    pub fn publish(
        &self,
        events: &mut Vec<ChoiceEvent>,
        phase: &Phase,
        output: impl FnOnce() -> Option<ChoiceOutput>,
    ) -> Result<(), WriteRefused> {
        let mut published = self.log.lock();
        if published.writer != self.epoch {
            events.clear();
            return Err(WriteRefused::Fenced);
        }
        if published.phase.is_settled() {
            events.clear();
            return Err(WriteRefused::Settled);
        }
        published.events.append(events);
        if key(&published.phase) != key(phase) {
            published.phase = phase.clone();
            if let Some(output) = output() {
                published.output = Some(Arc::new(output));
            }
        }
        published.waiters.wake_all();
        Ok(())
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

#[cfg(test)]
mod tests {
    use choicewise_proto::ChoiceEvent;
    use choicewise_proto::driver::CancelReason;

    use super::*;

    fn content(text: &str) -> Vec<ChoiceEvent> {
        vec![ChoiceEvent::Content(text.into())]
    }

    #[test]
    fn a_settled_log_refuses_every_write() {
        let log = Arc::new(ChoiceLog::new(0));
        let writer = log.take_over();
        let ended = Closed::Ended { late_error: None };
        writer
            .publish(&mut content("a"), &Phase::Closed(ended.clone()), || None)
            .unwrap();
        writer
            .publish(&mut Vec::new(), &Phase::Settled(ended), || None)
            .unwrap();
        let mut late = content("late");
        assert_eq!(
            writer.publish(&mut late, &Phase::Open, || None),
            Err(WriteRefused::Settled)
        );
        assert!(late.is_empty(), "the refused events are dropped");
        // Nor does a writer that takes over after the choice settled change it.
        let reader = log.take_over();
        let failed = Phase::Settled(Closed::Cancelled(CancelReason::Asked));
        assert_eq!(
            reader.publish(&mut content("x"), &failed, || None),
            Err(WriteRefused::Settled)
        );
        let published = log.lock();
        assert!(published.phase.is_settled());
        assert!(matches!(
            published.phase.closed(),
            Some(Closed::Ended { .. })
        ));
        assert_eq!(
            published.events.get(0),
            Some(&ChoiceEvent::Content("a".into()))
        );
        assert_eq!(published.events.get(1), None);
    }

    #[test]
    fn a_writer_taken_over_is_fenced_off() {
        let log = Arc::new(ChoiceLog::new(3));
        let actor = log.take_over();
        actor
            .publish(&mut content("a"), &Phase::Open, || None)
            .unwrap();
        // The actor is gone (say it panicked): the reader takes over.
        let reader = log.take_over();
        assert_eq!(
            actor.publish(&mut content("stale"), &Phase::Open, || None),
            Err(WriteRefused::Fenced)
        );
        reader
            .publish(&mut content("b"), &Phase::Open, || None)
            .unwrap();
        let published = log.lock();
        let events: Vec<_> = (0..)
            .map_while(|i| published.events.get(i).cloned())
            .collect();
        assert_eq!(
            events,
            [
                ChoiceEvent::Content("a".into()),
                ChoiceEvent::Content("b".into())
            ]
        );
    }
}
