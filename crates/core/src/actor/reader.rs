//! The reader actor: pulls the upstream one read at a time, routes every chunk to its choice's
//! actor (spawning it when the index first appears), and ends every choice when the stream ends.

use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use futures::FutureExt;
use futures::future::{Either, select};
use ractor::{Actor, ActorProcessingErr, ActorRef, ActorRuntime};

use super::choice::{
    ChoiceActor, ChoiceArgs, ChoiceMsg, Scratch, apply_batch_isolated, panic_message,
};
use crate::error::{Error, ErrorDetail};
use crate::feed::Feed;
use crate::lifecycle::Phase;
use crate::shared::{ChoiceShared, CompletionShared, LiveActor, UpstreamSignal};
use crate::split::{Batch, Splitter, Step};

/// Messages of the reader.
#[derive(Debug)]
pub(crate) enum ReaderMsg {
    /// Read the next piece of the upstream.
    Pull,
}

pub(crate) struct ReaderActor<F>(PhantomData<fn() -> F>);

impl<F> ReaderActor<F> {
    pub fn new() -> Self {
        ReaderActor(PhantomData)
    }
}

pub(crate) struct ReaderArgs<F> {
    pub feed: F,
    pub shared: Arc<CompletionShared>,
    /// Which upstream of the completion this reader serves (0 unless fanned out).
    pub upstream: usize,
    /// How many choices the upstream will have, when known (the request's `n`).
    pub expected: Option<u32>,
}

pub(crate) struct ReaderState<F> {
    feed: F,
    splitter: Splitter,
    shared: Arc<CompletionShared>,
    /// One per splitter slot, in the same order.
    choices: Vec<ChoiceSlot>,
    /// The stream is over and every choice has been told.
    ended: bool,
    upstream: usize,
    expected: Option<u32>,
    /// Told when one of this upstream's choices is cancelled.
    signal: Arc<UpstreamSignal>,
    /// The quiet timer (boxed: a timer inline would enlarge every idle completion by about a
    /// kilobyte), armed while choice actors run.
    quiet: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// Reused buffers for the batches the reader applies itself.
    scratch: Scratch,
    /// The batches of a small read the reader applies itself, by slot: kept by
    /// [`flush`](Self::flush) until [`apply_next`](Self::apply_next) applies them.
    here: Vec<(usize, Batch)>,
    /// The last read sent batches to choice actors.
    sent_to_actors: bool,
    /// The runtime has one worker: the choice actors run on the reader's thread.
    one_worker: bool,
    _live: LiveActor,
}

/// A read whose updates come to at most this many bytes of JSON is applied by the reader
/// itself, to each choice whose actor has nothing queued (a choice without an actor, first
/// seen or retired, gets one, which takes its batch). Values parsed before they came
/// (`from_chunks`, `from_events`) count nothing: their parse is done.
const APPLY_HERE_BYTES: usize = 4096;

/// Returns `Pending` once, having woken its task: the task goes to the back of its worker's
/// queue, behind the tasks it woke, without the runtime's deferred wake-ups of
/// `tokio::task::yield_now` (which poll the I/O driver before the task runs again).
async fn reschedule() {
    let mut yielded = false;
    std::future::poll_fn(|cx| match std::mem::replace(&mut yielded, true) {
        true => Poll::Ready(()),
        false => {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

/// Lets the tasks a choice's batch woke run before the reader parses the next choice's, on
/// the reader's own worker.
///
/// - With one worker, [`reschedule`]: the reader queues behind the consumers it woke.
/// - With more, `tokio::task::yield_now`, whose wake-up the worker defers until it has run
///   what it holds (the woken consumer waits in its LIFO slot). A self-wake would put the
///   reader in the worker's run queue and wake a parked worker to share it; that worker
///   then often took the reader or the next consumers while it was still coming up, so a
///   read's deliveries waited on a thread the system had yet to schedule. Deferred, the
///   reader is never in a queue another worker steals from (tokio may still wake the other
///   worker while this one searches before taking the reader back, but finds it nothing
///   to take).
async fn let_woken_run(one_worker: bool) {
    if one_worker {
        reschedule().await
    } else {
        tokio::task::yield_now().await
    }
}

/// A choice as the reader sees it.
struct ChoiceSlot {
    shared: Arc<ChoiceShared>,
    /// The choice's running actor; `None` while none runs (retired after the upstream went
    /// quiet, or not started yet). The next message starts one.
    actor: Option<ActorRef<ChoiceMsg>>,
    /// Messages sent to the choice's actors so far (their batch numbers).
    sent: u64,
}

impl ChoiceSlot {
    /// Sends a message to the choice's actor, starting one if none runs. Not linked to the
    /// reader: ractor would kill a stopping reader's children before they apply their
    /// queues, and the reader needs no events (a failed actor has failed its choice).
    fn send(&mut self, completion: &Arc<CompletionShared>, make: impl FnOnce(u64) -> ChoiceMsg) {
        self.sent += 1;
        let message = make(self.sent);
        let message = match &self.actor {
            Some(actor) => match actor.send_message(message) {
                Ok(()) => return,
                // It stopped (only a kill does that before its end): start another, which
                // finds the choice failed and counts what it is sent.
                Err(ractor::MessagingErr::SendErr(message)) => message,
                Err(_) => return,
            },
            None => message,
        };
        let args = ChoiceArgs {
            shared: self.shared.clone(),
            completion: completion.clone(),
        };
        match ActorRuntime::spawn_instant(None, ChoiceActor, args) {
            Ok((actor, _)) => {
                let _ = actor.send_message(message);
                self.actor = Some(actor);
            }
            Err(e) => {
                let index = self.shared.index;
                self.shared
                    .lock()
                    .fail(Error::from(ErrorDetail::ActorFailed {
                        choice: Some(index),
                        message: format!("could not start: {e}"),
                    }));
                self.shared.lock().settle(index, Ok(()));
            }
        }
    }

    /// Whether no actor is working on the choice: every batch sent has been handled.
    fn idle(&self) -> bool {
        self.shared.lock().handled == self.sent
    }

    /// Asks the running actor to apply what it has queued and stop, leaving the choice open.
    /// (Not ractor's `drain`: a draining actor that has not started yet refuses to link and
    /// never handles its queue.)
    fn retire(&mut self) {
        if let Some(actor) = self.actor.take() {
            let _ = actor.send_message(ChoiceMsg::Retire);
        }
    }
}

impl<F> ReaderState<F> {
    /// Applies the next batch that [`flush`](Self::flush) kept; `false` when none is left. A
    /// batch stays in `here` until it is applied, so that one the reader did not get to (a
    /// kill between two) is still applied when its state is dropped.
    fn apply_next(&mut self) -> bool {
        let Some((i, batch)) = self.here.pop() else {
            return false;
        };
        let shared = &self.choices[i].shared;
        apply_batch_isolated(shared, &self.shared, batch, &mut self.scratch);
        true
    }
}

impl<F> Drop for ReaderState<F> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // The reader was killed (every handle dropped) or failed: stop or end every choice.
        // Retired actors stop on their own once their short queue is applied.
        if self.shared.is_cancelled() {
            for choice in &self.choices {
                if let Some(actor) = &choice.actor {
                    actor.kill();
                }
            }
            return;
        }
        // Batches routed but not yet applied are applied first: their choices' ends are
        // numbered after them.
        while self.apply_next() {}
        let error = ErrorDetail::ActorFailed {
            choice: None,
            message: "the reader stopped before the stream ended".to_string(),
        };
        let error = self
            .shared
            .lock()
            .upstream_error(self.upstream, Error::from(error));
        for choice in &mut self.choices {
            let outcome = Err(error.clone());
            choice.send(&self.shared, |seq| ChoiceMsg::End { seq, outcome });
        }
        let mut state = self.shared.lock();
        state.end_upstream(self.upstream, self.splitter.meta.clone(), Err(error));
    }
}

impl<F: Feed> ReaderState<F> {
    /// Publishes new choices, sends every pending batch to its choice's actor (starting one
    /// where none runs), and publishes the warnings. The batches of a small read whose
    /// actors are idle are the reader's own: kept in `here` for
    /// [`apply_next`](Self::apply_next).
    fn flush(&mut self) {
        let known = self.choices.len();
        let mut new_choices = Vec::new();
        if self.splitter.slots.len() > known {
            let mut state = self.shared.lock();
            for slot in &self.splitter.slots[known..] {
                let index = state.global_index(self.upstream, slot.index);
                let shared = Arc::new(ChoiceShared::new(
                    index,
                    self.shared.config.max_tool_calls,
                    self.signal.clone(),
                ));
                new_choices.push(shared.clone());
                self.choices.push(ChoiceSlot {
                    shared,
                    actor: None,
                    sent: 0,
                });
            }
        }
        if self.shared.is_closing() {
            // Every choice still to appear is unwanted.
            for choice in &new_choices {
                choice.cancel();
            }
        }
        let routed: usize = self.splitter.slots.iter().map(|s| s.batch.text.len()).sum();
        let here = routed <= APPLY_HERE_BYTES;
        for (i, (slot, choice)) in self
            .splitter
            .slots
            .iter_mut()
            .zip(&mut self.choices)
            .enumerate()
        {
            if slot.batch.is_empty() {
                continue;
            }
            // A large read (a replayed file, a burst) is followed by others: the slot is
            // refilled with a batch the choice's actor handed back, or one as large as this
            // one, so that it neither grows read by read nor is freed on the actor's thread.
            // A small read's slot is left empty, holding no memory while the stream is quiet.
            let refill = match here {
                true => Batch::default(),
                false => choice
                    .shared
                    .spare_batch()
                    .unwrap_or_else(|| Batch::sized_like(&slot.batch)),
            };
            let batch = std::mem::replace(&mut slot.batch, refill);
            choice.shared.routing(choice.sent + 1);
            if here && choice.actor.is_some() && choice.idle() {
                choice.sent += 1;
                self.here.push((i, batch));
                continue;
            }
            choice.send(&self.shared, |seq| ChoiceMsg::Batch { seq, batch });
            self.sent_to_actors = true;
        }
        // Popped from the back: the choices are applied in the order they appeared.
        self.here.reverse();
        if !new_choices.is_empty() || !self.splitter.warnings.is_empty() {
            let mut state = self.shared.lock();
            if !new_choices.is_empty() && state.meta.model.is_none() {
                // The model is known early to choice handles that count tokens.
                state.meta.model = self.splitter.meta.model.clone();
            }
            state.choices.extend(new_choices);
            state.warnings.append(&mut self.splitter.warnings);
            state.waiters.wake_all();
        }
    }

    /// Applies the batches [`flush`](Self::flush) kept, one choice after the other, letting
    /// the tasks a choice's batch woke (its sub-streams' readers) run before the next
    /// choice's parse rather than after the whole read's ([`let_woken_run`]).
    async fn apply_here(&mut self) {
        while self.apply_next() {
            if !self.here.is_empty() {
                let_woken_run(self.one_worker).await;
            }
        }
    }

    /// With one worker, lets the choice actors the last read was sent to run, and the
    /// consumers they wake, before reading on: they share the reader's thread, so reading
    /// every read the upstream has ready first (a backlog after a stall) would only delay
    /// their deliveries. With more workers the reader reads on while they run on another.
    async fn yield_to_actors(&mut self) {
        if std::mem::take(&mut self.sent_to_actors) && self.one_worker {
            reschedule().await;
        }
    }

    /// Reads the next piece of the upstream: `None` when a cancel interrupted the wait (a pull
    /// is cancel-safe: its only await is the read). A panic while reading or routing (or in
    /// the upstream stream itself) ends the stream with a typed error after what was routed
    /// before it is delivered.
    async fn next_step(&mut self) -> Option<Step> {
        let signal = self.signal.clone();
        let ReaderState {
            feed,
            splitter,
            shared,
            choices,
            quiet,
            ..
        } = self;
        let mut pull = pin!(AssertUnwindSafe(feed.pull(splitter)).catch_unwind());
        let pulled = async move {
            match futures::poll!(pull.as_mut()) {
                Poll::Ready(step) => step,
                // The upstream is waiting: if it stays quiet for `hibernate_after`, the choice
                // actors retire until the next update (their state lives in the choices, not
                // in them).
                Poll::Pending => match shared.config.hibernate_after.and_then(|after| {
                    tokio::time::Instant::now()
                        .checked_add(after)
                        .filter(|_| choices.iter().any(|c| c.actor.is_some()))
                }) {
                    Some(due) => {
                        // One timer serves every wait: armed once, it is moved on only when it
                        // fires early (reads came since it was set), not at every read.
                        let timer =
                            quiet.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
                        loop {
                            match select(pull.as_mut(), timer.as_mut()).await {
                                Either::Left((step, _)) => break step,
                                Either::Right(((), _)) if tokio::time::Instant::now() < due => {
                                    timer.as_mut().reset(due);
                                }
                                Either::Right(((), _)) => {
                                    *quiet = None;
                                    choices.iter_mut().for_each(ChoiceSlot::retire);
                                    break pull.await;
                                }
                            }
                        }
                    }
                    _ => pull.await,
                },
            }
        };
        let step = match select(pin!(pulled), pin!(signal.cancelled())).await {
            Either::Left((step, _)) => step,
            Either::Right(((), _)) => return None,
        };
        Some(step.unwrap_or_else(|panic| {
            Step::End(Err(Error::from(ErrorDetail::ActorFailed {
                choice: None,
                message: panic_message(&panic),
            })))
        }))
    }

    /// Tells every choice the stream is over (queued behind its updates), and records the end.
    fn end(&mut self, outcome: Result<(), Error>) {
        let outcome = match outcome {
            Ok(()) => Ok(()),
            Err(e) => Err(self.shared.lock().upstream_error(self.upstream, e)),
        };
        for choice in &mut self.choices {
            let outcome = outcome.clone();
            choice.send(&self.shared, |seq| ChoiceMsg::End { seq, outcome });
            choice.actor = None;
        }
        let meta = std::mem::take(&mut self.splitter.meta);
        let mut state = self.shared.lock();
        let dropped = state.upstreams[self.upstream].dropped;
        if let Some(n) = self.expected.filter(|_| dropped || outcome.is_err()) {
            // A declared choice that never appeared is listed all the same, so that every
            // choice the caller asked for is accounted for: failed with the upstream's error
            // (its request failed before it appeared), or cancelled (nobody wanted it).
            let seen: std::collections::HashSet<u32> =
                self.splitter.slots.iter().map(|s| s.index).collect();
            for local in (0..n).filter(|i| !seen.contains(i)) {
                let index = state.global_index(self.upstream, local);
                let choice = Arc::new(ChoiceShared::new(
                    index,
                    self.shared.config.max_tool_calls,
                    self.signal.clone(),
                ));
                {
                    let mut choice = choice.lock();
                    if dropped {
                        choice.cancel();
                    }
                    choice.settle(index, outcome.clone());
                }
                state.choices.push(choice);
            }
        }
        state.end_upstream(self.upstream, meta, outcome);
        drop(state);
        self.ended = true;
    }

    /// Whether no choice of this upstream is wanted any more: at least one was cancelled,
    /// every expected choice has appeared, and each has finished (its finish was seen),
    /// failed or been cancelled.
    fn unwanted(&self) -> bool {
        if self.shared.is_closing() {
            // No choice still to appear is wanted: only the finishing ones are waited for.
            // (A choice published while the completion was being closed is cancelled here.)
            for (slot, choice) in self.splitter.slots.iter().zip(&self.choices) {
                if !slot.finished {
                    choice.shared.cancel();
                }
            }
        } else if !self.signal.any_cancelled()
            || self.choices.is_empty()
            || self
                .expected
                .is_some_and(|n| self.choices.len() < n as usize)
        {
            return false;
        }
        self.splitter
            .slots
            .iter()
            .zip(&self.choices)
            .all(|(slot, choice)| {
                slot.finished || !matches!(choice.shared.lock().phase, Phase::Open)
            })
    }

    /// Ends the stream early because no choice is wanted: what was routed is delivered,
    /// every choice ends cleanly, and the upstream is dropped with the reader's state.
    fn drop_upstream(&mut self) {
        self.flush();
        while self.apply_next() {}
        self.shared.lock().upstreams[self.upstream].dropped = true;
        self.end(Ok(()));
    }
}

impl<F: Feed> Actor for ReaderActor<F> {
    type Msg = ReaderMsg;
    type State = ReaderState<F>;
    type Arguments = ReaderArgs<F>;

    async fn pre_start(
        &self,
        _myself: ActorRef<ReaderMsg>,
        args: ReaderArgs<F>,
    ) -> Result<ReaderState<F>, ActorProcessingErr> {
        let config = &args.shared.config;
        let splitter = Splitter::with_dialect(
            config.max_event_size,
            config.max_choices,
            config.strict_sse,
            config.dialect,
        );
        let signal = args.shared.signals[args.upstream].clone();
        Ok(ReaderState {
            feed: args.feed,
            splitter,
            shared: args.shared,
            choices: Vec::new(),
            ended: false,
            upstream: args.upstream,
            expected: args.expected,
            signal,
            quiet: None,
            scratch: Scratch::default(),
            here: Vec::new(),
            sent_to_actors: false,
            one_worker: tokio::runtime::Handle::try_current()
                .is_ok_and(|rt| rt.metrics().num_workers() == 1),
            _live: LiveActor::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<ReaderMsg>,
        _state: &mut ReaderState<F>,
    ) -> Result<(), ActorProcessingErr> {
        myself.send_message(ReaderMsg::Pull)?;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<ReaderMsg>,
        message: ReaderMsg,
        state: &mut ReaderState<F>,
    ) -> Result<(), ActorProcessingErr> {
        let ReaderMsg::Pull = message;
        // One message runs the whole stream: no round trip through the mailbox per read. A
        // kill still interrupts it at any wait (ractor races the handler against its signal
        // port), and the runtime's budget makes it yield to the other tasks of its worker
        // when the upstream is always ready.
        loop {
            if state.unwanted() {
                state.drop_upstream();
                myself.stop(None);
                return Ok(());
            }
            let Some(step) = state.next_step().await else {
                // A cancel interrupted the wait: see whether the upstream is still wanted.
                continue;
            };
            state.flush();
            state.apply_here().await;
            state.yield_to_actors().await;
            match step {
                Step::Continue => tokio::task::coop::consume_budget().await,
                Step::End(outcome) => {
                    // The choice actors apply their queues and the end on their own.
                    state.end(outcome);
                    myself.stop(None);
                    return Ok(());
                }
            }
        }
    }
}
