//! The reader actor: reads one upstream, routes every chunk's choices to their actors, and
//! supervises those actors.
//!
//! The reader never waits on its upstream inside a handler. It polls the upstream with a
//! waker that sends it [`ReaderMsg::Poll`]: when the upstream is pending, the reader goes
//! back to its mailbox, free to handle a cancel or a supervision event at once, and the
//! upstream's readiness reaches it as the next message (one task wake-up, as an `await`
//! would cost). One read is split per message; its updates go at once to the choices whose
//! actors are idle, and to the busy ones with a later read (see `policy::FLUSH_BYTES`), when the
//! upstream has nothing more ready, or before a cancel or a close is handled.
//!
//! Its children, one actor per choice, are spawned linked to it when the choice first
//! appears. The reader handles their supervision events: a child that panicked fails its
//! choice alone (the reader, the choice's only writer once the child is gone, publishes the
//! failure); a child that retired while the upstream was quiet hands its state back, kept
//! in the choice's slot until the next update starts a new child with it. When the stream
//! ends, every child is told after its updates, settles its choice and stops; the reader
//! stops once the last child has.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use choicewise_proto::driver::{Batch, ChoiceCore, Closed, Phase, Splitter, Step};
use choicewise_proto::{ChoiceOutput, Error, ErrorDetail};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, ActorRuntime, SupervisionEvent};

use super::choice::{ChoiceActor, ChoiceActorState, ChoiceArgs, Handback};
use super::policy::{Flush, FlushPolicy, retire_at};
use crate::completion::{ChoiceEntry, CompletionShared};
use crate::log::{ChoiceLog, lock};
use crate::msg::{ChoiceMsg, ReaderMsg};
use crate::source::{Input, Upstream};

pub(crate) struct ReaderActor;

pub(crate) struct ReaderArgs {
    pub input: Input,
    /// The source's idle timeout.
    pub idle: Option<std::time::Duration>,
    pub completion: Arc<CompletionShared>,
    /// Which upstream of the completion this reader serves (0 unless fanned out).
    pub upstream: usize,
    /// How many choices the upstream will have, when known.
    pub expected: Option<u32>,
}

/// Where the reader is in its life.
///
/// ```text
/// Reading { closing: None } ──Close { keep }──▶ Reading { closing: Some(keep) }
///        └──────── the stream ends, or no choice is wanted ────────▶ Draining ──last child ended──▶ (stops)
/// ```
enum ReaderPhase {
    /// Reading the upstream; `closing`: every choice, and every choice still to appear, is
    /// unwanted but those kept (only the kept and the finishing ones are waited for).
    Reading {
        closing: Option<std::sync::Arc<[u32]>>,
    },
    /// The stream is over and every choice was told how (after its updates); waiting for
    /// the choice actors to end.
    Draining(Result<(), Error>),
}

pub(crate) struct ReaderState {
    /// The upstream; `None` once dropped.
    upstream_input: Option<Upstream>,
    splitter: Splitter,
    completion: Arc<CompletionShared>,
    upstream: usize,
    expected: Option<u32>,
    /// One per splitter slot, in the same order.
    slots: Vec<ChoiceSlot>,
    /// A choice of this upstream was cancelled: the upstream may be dropped once no choice
    /// is wanted (see [`ReaderState::unwanted`]).
    cancelled_any: bool,
    phase: ReaderPhase,
    myself: ActorRef<ReaderMsg>,
    /// Wakes the reader through its mailbox.
    poll: Arc<PollWaker>,
    waker: Waker,
    /// The hibernation timer (boxed: a timer inline would enlarge every idle completion),
    /// armed while choice actors run and the upstream waits.
    quiet: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When the last read came, for the hibernation timer.
    last_read: tokio::time::Instant,
    #[cfg(feature = "diagnostics")]
    _live: crate::diagnostics::LiveActor,
}

/// A choice as its reader sees it: its entry (log and address), who holds its state, and
/// whether its updates are still wanted. (Whether the stream finished it is the
/// splitter's: [`Splitter::choice_finished`].)
struct ChoiceSlot {
    entry: Arc<ChoiceEntry>,
    actor: ActorSlot,
    wanted: Wanted,
}

/// Whether a choice's updates are still wanted.
///
/// ```text
/// Yes ──cancel sent──▶ Cancelled
///  └──┴──its update or its actor failed──▶ Failed
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    Yes,
    /// A cancel was sent to the choice.
    Cancelled,
    /// The choice failed (its own update, or its actor).
    Failed,
}

/// A running actor's progress: the batches the reader sent it, and what the actor hands
/// back (its emptied batches and the count it applied; see [`Handback`] for who writes
/// what). New with each actor.
struct Progress {
    sent: u64,
    handback: Arc<Handback>,
}

impl Progress {
    /// Whether the actor still has batches to apply.
    fn busy(&self) -> bool {
        self.handback.applied.load(Ordering::Acquire) < self.sent
    }
}

/// Who holds the choice's state.
enum ActorSlot {
    /// Its actor, and its progress.
    Running {
        actor: ActorRef<ChoiceMsg>,
        progress: Progress,
    },
    /// Its actor, asked to retire; its state comes back in the actor's supervision event,
    /// and what comes for the choice meanwhile waits here.
    Retiring {
        id: ActorId,
        pending: Vec<ChoiceMsg>,
    },
    /// The reader, while the choice's actor is retired.
    Parked(Box<ChoiceCore>),
    /// Nobody: the choice settled. Or its actor died, and what is left of the choice (its
    /// phase and its ignored updates) is the reader's.
    Gone(Option<Box<ChoiceCore>>),
}

/// A waker that sends the reader [`ReaderMsg::Poll`], at most one at a time.
struct PollWaker {
    reader: ActorRef<ReaderMsg>,
    scheduled: AtomicBool,
}

impl Wake for PollWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            let _ = self.reader.send_message(ReaderMsg::Poll);
        }
    }
}

impl ReaderState {
    /// Polls the upstream once: routes what one read brought, or arms the timers and waits
    /// for the waker. A panic while reading or splitting (or in the upstream's own code)
    /// ends the stream with a typed error, after what was routed before it.
    fn poll_upstream(&mut self) {
        self.poll.scheduled.store(false, Ordering::Release);
        if !matches!(self.phase, ReaderPhase::Reading { .. }) {
            return;
        }
        let Some(upstream) = &mut self.upstream_input else {
            return;
        };
        let mut cx = Context::from_waker(&self.waker);
        let splitter = &mut self.splitter;
        let step = match catch_unwind(AssertUnwindSafe(|| upstream.poll_step(&mut cx, splitter))) {
            Ok(Poll::Pending) => {
                self.flush();
                self.poll_quiet();
                return;
            }
            Ok(Poll::Ready(step)) => step,
            Err(panic) => Step::End(Err(Error::from(ErrorDetail::ActorFailed {
                choice: None,
                message: panic_message(&panic),
            }))),
        };
        self.last_read = tokio::time::Instant::now();
        match step {
            Step::Continue => {
                self.flush_to(Flush::Idle);
                self.waker.wake_by_ref()
            }
            Step::End(outcome) => self.end(outcome),
        }
    }

    /// While the upstream waits and choice actors run: once it has been quiet for
    /// `hibernate_after`, the actors retire (their state comes back to the reader).
    fn poll_quiet(&mut self) {
        if !self
            .slots
            .iter()
            .any(|s| matches!(s.actor, ActorSlot::Running { .. }))
        {
            return;
        }
        let Some(due) = retire_at(self.last_read, self.completion.config.hibernate_after) else {
            return; // Never: the actors stay for the whole stream.
        };
        let timer = self
            .quiet
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        let mut cx = Context::from_waker(&self.waker);
        loop {
            if timer.as_mut().poll(&mut cx).is_pending() {
                return;
            }
            if tokio::time::Instant::now() >= due {
                break;
            }
            // Reads came since it was set: moved on, not reset at every read.
            timer.as_mut().reset(due);
        }
        self.quiet = None;
        for slot in &mut self.slots {
            if let ActorSlot::Running { actor, .. } = &slot.actor {
                let id = actor.get_id();
                let _ = actor.send_message(ChoiceMsg::Retire);
                slot.actor = ActorSlot::Retiring {
                    id,
                    pending: Vec::new(),
                };
            }
        }
    }

    /// Starts a choice's actor with its state.
    fn spawn(&self, slot: usize, core: Box<ChoiceCore>) -> ActorSlot {
        let entry = &self.slots[slot].entry;
        let handback = Arc::new(Handback::default());
        let args = ChoiceArgs {
            core,
            writer: entry.log.take_over(),
            completion: self.completion.clone(),
            handback: handback.clone(),
            reader: self.myself.clone(),
            slot,
        };
        match ActorRuntime::spawn_linked_instant(None, ChoiceActor, args, self.myself.get_cell()) {
            Ok((actor, _)) => ActorSlot::Running {
                actor,
                progress: Progress { sent: 0, handback },
            },
            Err(e) => {
                let mut orphan = orphan_of(&entry.log);
                orphan.fail(Error::from(ErrorDetail::ActorFailed {
                    choice: Some(entry.index()),
                    message: format!("could not start: {e}"),
                }));
                publish_orphan(&entry.log, &orphan);
                ActorSlot::Gone(Some(Box::new(orphan)))
            }
        }
    }

    /// Sends a message to a choice's actor, starting one for a retired choice; what comes
    /// for a choice whose actor died is counted (updates) or settles it (the end).
    fn send(&mut self, slot: usize, message: ChoiceMsg) {
        let actor = std::mem::replace(&mut self.slots[slot].actor, ActorSlot::Gone(None));
        self.slots[slot].actor = match actor {
            ActorSlot::Running {
                actor,
                mut progress,
            } => {
                let batch = matches!(message, ChoiceMsg::Batch(_));
                // Sent, or it died: its supervision event is on its way and will fail the
                // choice.
                if actor.send_message(message).is_ok() && batch {
                    progress.sent += 1;
                }
                ActorSlot::Running { actor, progress }
            }
            ActorSlot::Retiring { id, mut pending } => {
                pending.push(message);
                ActorSlot::Retiring { id, pending }
            }
            ActorSlot::Parked(core) => {
                let mut started = self.spawn(slot, core);
                if let ActorSlot::Running { actor, progress } = &mut started {
                    let batch = matches!(message, ChoiceMsg::Batch(_));
                    if actor.send_message(message).is_ok() && batch {
                        progress.sent += 1;
                    }
                }
                started
            }
            ActorSlot::Gone(Some(mut orphan)) => {
                let log = &self.slots[slot].entry.log;
                match message {
                    ChoiceMsg::Batch(batch) => {
                        orphan.ignored(batch.len() as u64, batch.first_line())
                    }
                    ChoiceMsg::End(outcome) => self.settle_orphan(log, &mut orphan, outcome),
                    ChoiceMsg::Cancel | ChoiceMsg::Retire => {}
                }
                ActorSlot::Gone(Some(orphan))
            }
            ActorSlot::Gone(None) => ActorSlot::Gone(None),
        };
    }

    /// Settles a choice whose actor died, publishing its warning.
    fn settle_orphan(
        &self,
        log: &Arc<ChoiceLog>,
        orphan: &mut ChoiceCore,
        outcome: Result<(), Error>,
    ) {
        let mut events = Vec::new();
        if let Some(w) = orphan.settle(outcome, &mut events) {
            self.completion.lock().warnings.push(w);
        }
        publish_orphan(log, orphan);
    }

    /// Bytes of updates read and not yet sent to their choices.
    fn unflushed(&self) -> usize {
        self.splitter.pending_bytes()
    }

    /// Publishes the choices the last read brought, sends every choice its updates, and
    /// publishes the warnings.
    fn flush(&mut self) {
        self.flush_to(Flush::All);
    }

    /// Publishes the choices the last read brought and the warnings, and sends the choices
    /// their updates, as `to` says.
    fn flush_to(&mut self, to: Flush) {
        let known = self.slots.len();
        let mut new_choices = Vec::new();
        if self.splitter.choice_count() > known {
            let indexes: Vec<u32> = {
                let mut state = self.completion.lock();
                (known..self.splitter.choice_count())
                    .map(|slot| state.global_index(self.upstream, self.splitter.choice_index(slot)))
                    .collect()
            };
            for index in indexes {
                let slot = self.slots.len();
                let entry = Arc::new(ChoiceEntry {
                    log: Arc::new(ChoiceLog::new(index)),
                    addr: Some((self.myself.clone(), slot)),
                });
                new_choices.push(entry.clone());
                self.slots.push(ChoiceSlot {
                    entry,
                    actor: ActorSlot::Gone(None),
                    wanted: Wanted::Yes,
                });
                let core = Box::new(ChoiceCore::new(
                    index,
                    self.completion.config.stream.max_tool_calls,
                ));
                self.slots[slot].actor = self.spawn(slot, core);
            }
        }
        let routed = self.unflushed();
        let policy = FlushPolicy::new(to, routed);
        for i in 0..self.slots.len() {
            if self.splitter.pending(i).is_empty() {
                continue;
            }
            let busy = match &self.slots[i].actor {
                ActorSlot::Running { progress, .. } => progress.busy(),
                // Its updates queue behind its retirement.
                ActorSlot::Retiring { .. } => true,
                ActorSlot::Parked(_) | ActorSlot::Gone(_) => false,
            };
            if !policy.sends(busy) {
                continue; // Its actor is busy: these go with the next ones.
            }
            let recycled = match (&self.slots[i].actor, policy.refills()) {
                (ActorSlot::Running { progress, .. }, true) => lock(&progress.handback.pool).take(),
                _ => None,
            };
            let refill = match policy.refills() {
                true => recycled.unwrap_or_else(|| Batch::sized_like(self.splitter.pending(i))),
                false => Batch::default(),
            };
            let batch = self.splitter.take_pending(i, refill);
            self.send(i, ChoiceMsg::Batch(batch));
        }
        if let ReaderPhase::Reading {
            closing: Some(keep),
        } = &self.phase
        {
            // Every choice still to appear is unwanted, but those kept.
            let keep = keep.clone();
            for slot in known..self.slots.len() {
                if !keep.contains(&self.slots[slot].entry.index()) {
                    self.cancel(slot);
                }
            }
        }
        if !new_choices.is_empty() || self.splitter.has_warnings() {
            let mut state = self.completion.lock();
            if !new_choices.is_empty() && state.meta.model().is_none() {
                // The model is known early to choice handles that count tokens.
                let model = self.splitter.meta().model().map(str::to_string);
                state.meta.set_model(model);
            }
            state.choices.extend(new_choices);
            self.splitter.take_warnings(&mut state.warnings);
            state.waiters.wake_all();
        }
    }

    /// Sends the choice in `slot` a cancel (after the updates sent before it).
    fn cancel(&mut self, slot: usize) {
        self.cancelled_any = true;
        if self.slots[slot].wanted == Wanted::Yes {
            self.slots[slot].wanted = Wanted::Cancelled;
            self.send(slot, ChoiceMsg::Cancel);
        }
    }

    /// The stream is over: sends every choice what was read and then its end, lists the declared
    /// choices that never appeared, and records the upstream's end.
    fn end(&mut self, outcome: Result<(), Error>) {
        self.flush();
        let outcome = match outcome {
            Ok(()) => Ok(()),
            Err(e) => Err(self.completion.lock().upstream_error(self.upstream, e)),
        };
        // A failed sample's replacement is reserved before its choices learn of the failure:
        // a pick that counts them then counts the replacement too.
        let dropped = self.completion.lock().upstreams[self.upstream].dropped;
        let reserved = match outcome.is_err() && !dropped {
            true => self.completion.reserve_replacements(self.failing()),
            false => 0,
        };
        self.phase = ReaderPhase::Draining(outcome.clone());
        self.quiet = None;
        for slot in 0..self.slots.len() {
            self.send(slot, ChoiceMsg::End(outcome.clone()));
        }
        let meta = self.splitter.take_meta();
        let mut state = self.completion.lock();
        let dropped = state.upstreams[self.upstream].dropped;
        let mut listed = false;
        if let Some(n) = self.expected.filter(|_| dropped || outcome.is_err()) {
            // A declared choice that never appeared is listed all the same, so that every
            // choice asked for is accounted for: failed with the upstream's error (its request
            // failed before it appeared), or cancelled (nobody wanted it). Nothing runs it:
            // the reader is its only writer.
            let seen: std::collections::HashSet<u32> = (0..self.splitter.choice_count())
                .map(|slot| self.splitter.choice_index(slot))
                .collect();
            for local in (0..n).filter(|i| !seen.contains(i)) {
                let index = state.global_index(self.upstream, local);
                let log = Arc::new(ChoiceLog::new(index));
                let mut core = ChoiceCore::new(index, 0);
                let mut events = Vec::new();
                if dropped {
                    core.cancel(&mut events);
                }
                core.settle(outcome.clone(), &mut events);
                // A new log: its first writer, refused nothing.
                let _ = log
                    .take_over()
                    .publish(&mut events, core.phase(), || Some(core.output()));
                state
                    .choices
                    .push(Arc::new(ChoiceEntry { log, addr: None }));
                listed = true;
            }
        }
        // Whoever waits for the choices learns of those listed now, even when the
        // completion does not end with this upstream (samples whose replacements are still
        // due keep it open): a pick never waits for a choice it was not told of.
        if listed {
            state.waiters.wake_all();
        }
        state.end_upstream(self.upstream, meta, outcome);
        drop(state);
        // The upstream is closed now, whatever its choices' actors still have to do.
        self.upstream_input = None;
        self.completion.after_upstream_end(reserved);
    }

    /// How many of this upstream's choices its failure fails: those still wanted and not
    /// finished, and the declared ones that never appeared.
    fn failing(&self) -> usize {
        let open = (self.slots.iter().enumerate())
            .filter(|(i, slot)| slot.wanted == Wanted::Yes && !self.splitter.choice_finished(*i))
            .count();
        let missing = self
            .expected
            .map_or(0, |n| (n as usize).saturating_sub(self.slots.len()));
        open + missing
    }

    /// Whether no choice of this upstream is wanted any more: the completion is closing, or
    /// at least one choice was cancelled and every expected choice has appeared; and each
    /// has finished (its finish was seen), failed or been cancelled.
    fn unwanted(&self) -> bool {
        let ReaderPhase::Reading { closing } = &self.phase else {
            return false;
        };
        let closing = closing.is_some();
        if !closing
            && (!self.cancelled_any || self.expected.is_some_and(|n| self.slots.len() < n as usize))
        {
            return false;
        }
        (self.slots.iter().enumerate())
            .all(|(i, slot)| self.splitter.choice_finished(i) || slot.wanted != Wanted::Yes)
    }

    /// Ends the stream early when no choice is wanted: what was routed is delivered, every
    /// choice ends cleanly, and the upstream is dropped (closing its connection).
    fn drop_if_unwanted(&mut self) {
        if self.unwanted() {
            self.completion.lock().upstreams[self.upstream].dropped = true;
            self.upstream_input = None;
            self.end(Ok(()));
        }
    }

    /// The actor with this id, if it is one of the choices': its slot.
    fn slot_of(&self, id: ActorId) -> Option<usize> {
        self.slots.iter().position(|s| match &s.actor {
            ActorSlot::Running { actor, .. } => actor.get_id() == id,
            ActorSlot::Retiring { id: retiring, .. } => *retiring == id,
            _ => false,
        })
    }

    /// A choice actor stopped: after its end (the choice settled), or retired (its state
    /// comes back: kept for the next actor, or handed to one at once if messages wait).
    fn child_stopped(&mut self, id: ActorId, state: Option<ractor::actor::messages::BoxedState>) {
        let Some(slot) = self.slot_of(id) else {
            return;
        };
        let actor = std::mem::replace(&mut self.slots[slot].actor, ActorSlot::Gone(None));
        let core = state
            .and_then(|mut s| s.take::<ChoiceActorState>().ok())
            .map(|s| s.core);
        match (actor, core) {
            (ActorSlot::Retiring { pending, .. }, Some(core)) => {
                self.slots[slot].actor = ActorSlot::Parked(core);
                for message in pending {
                    self.send(slot, message);
                }
            }
            (_, Some(core)) if core.phase().is_settled() => {}
            // Killed, or stopped with its choice unsettled: nothing else stops one.
            (_, _) => self.child_failed_at(
                slot,
                "the choice's actor stopped before the stream ended".to_string(),
            ),
        }
    }

    /// A choice actor failed (a panic): its choice fails alone, with the panic's message;
    /// the reader takes over what is left of it.
    fn child_failed(&mut self, id: ActorId, message: String) {
        if let Some(slot) = self.slot_of(id) {
            self.child_failed_at(slot, message);
        }
    }

    fn child_failed_at(&mut self, slot: usize, message: String) {
        let log = self.slots[slot].entry.log.clone();
        let mut orphan = orphan_of(&log);
        orphan.fail(Error::from(ErrorDetail::ActorFailed {
            choice: Some(log.index),
            message,
        }));
        publish_orphan(&log, &orphan);
        let pending = match std::mem::replace(
            &mut self.slots[slot].actor,
            ActorSlot::Gone(Some(Box::new(orphan))),
        ) {
            ActorSlot::Retiring { pending, .. } => pending,
            _ => Vec::new(),
        };
        self.slots[slot].wanted = Wanted::Failed;
        for message in pending {
            self.send(slot, message);
        }
        if let ReaderPhase::Draining(outcome) = &self.phase {
            // Its end was lost with it.
            let outcome = outcome.clone();
            self.send(slot, ChoiceMsg::End(outcome));
        }
    }

    /// Whether the reader's work is done: the stream is over and every choice has settled.
    fn done(&self) -> bool {
        matches!(self.phase, ReaderPhase::Draining(_))
            && self
                .slots
                .iter()
                .all(|s| matches!(s.actor, ActorSlot::Gone(_)))
    }
}

/// What is left of a choice whose actor is gone, as its log published it.
fn orphan_of(log: &ChoiceLog) -> ChoiceCore {
    ChoiceCore::orphan(log.index, log.lock().phase.clone())
}

/// Publishes the phase of a choice whose actor is gone, the reader taking the log over; its
/// message is the one published at its close, or rebuilt from its events. Refused, as a
/// settled log refuses every write, when the choice had settled.
fn publish_orphan(log: &Arc<ChoiceLog>, orphan: &ChoiceCore) {
    let output = {
        let published = log.lock();
        published.outcome(log.index).0
    };
    let output = mark_cancelled(output, orphan.phase());
    let _ = log
        .take_over()
        .publish(&mut Vec::new(), orphan.phase(), || Some(output));
}

fn mark_cancelled(mut output: ChoiceOutput, phase: &Phase) -> ChoiceOutput {
    if matches!(phase.closed(), Some(Closed::Cancelled)) {
        output.cancelled = true;
        output.finish_reason = None;
    }
    output
}

impl Drop for ReaderState {
    fn drop(&mut self) {
        if matches!(self.phase, ReaderPhase::Draining(_)) && self.done() {
            return;
        }
        // The reader was killed (every handle dropped) or failed: its children die with it
        // (the supervision tree), so every choice not settled yet is settled here, the last
        // writer (a log takes no write after it settled).
        let error = Error::from(ErrorDetail::ActorFailed {
            choice: None,
            message: "the reader stopped before the stream ended".to_string(),
        });
        let error = self.completion.lock().upstream_error(self.upstream, error);
        for slot in &self.slots {
            let log = &slot.entry.log;
            let mut orphan = orphan_of(log);
            if orphan.phase().is_settled() {
                continue;
            }
            let mut events = Vec::new();
            orphan.settle(Err(error.clone()), &mut events);
            publish_orphan(log, &orphan);
        }
        let meta = self.splitter.take_meta();
        self.completion
            .lock()
            .end_upstream(self.upstream, meta, Err(error));
        // Not replaced (killed: its completion is going; failed: a fault of ours), but the
        // last upstream to end still stops an open sampling.
        self.completion.after_upstream_end(0);
    }
}

impl Actor for ReaderActor {
    type Msg = ReaderMsg;
    type State = ReaderState;
    type Arguments = ReaderArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ReaderMsg>,
        args: ReaderArgs,
    ) -> Result<ReaderState, ActorProcessingErr> {
        let config = &args.completion.config;
        let poll = Arc::new(PollWaker {
            reader: myself.clone(),
            scheduled: AtomicBool::new(false),
        });
        let closing = args.completion.closing_keep();
        Ok(ReaderState {
            upstream_input: Some(Upstream::new(args.input, args.idle)),
            splitter: Splitter::new(&config.stream),
            expected: args.expected,
            upstream: args.upstream,
            completion: args.completion,
            slots: Vec::new(),
            cancelled_any: false,
            phase: ReaderPhase::Reading { closing },
            myself,
            waker: Waker::from(poll.clone()),
            poll,
            quiet: None,
            last_read: tokio::time::Instant::now(),
            #[cfg(feature = "diagnostics")]
            _live: crate::diagnostics::LiveActor::new(),
        })
    }

    async fn post_start(
        &self,
        _myself: ActorRef<ReaderMsg>,
        state: &mut ReaderState,
    ) -> Result<(), ActorProcessingErr> {
        state.poll_upstream();
        state.drop_if_unwanted();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<ReaderMsg>,
        message: ReaderMsg,
        state: &mut ReaderState,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(message, ReaderMsg::Poll) {
            // What was read before a cancel or a close reaches its choices before it.
            state.flush();
        }
        match message {
            ReaderMsg::Poll => state.poll_upstream(),
            ReaderMsg::Cancel { slot } if slot < state.slots.len() => state.cancel(slot),
            ReaderMsg::Cancel { .. } => {}
            ReaderMsg::Close { keep } => {
                if let ReaderPhase::Reading { closing } = &mut state.phase {
                    *closing = Some(keep.clone());
                    let unfinished: Vec<usize> = (0..state.splitter.choice_count())
                        .filter(|&slot| {
                            !state.splitter.choice_finished(slot)
                                && !keep.contains(&state.slots[slot].entry.index())
                        })
                        .collect();
                    for slot in unfinished {
                        state.cancel(slot);
                    }
                }
            }
            ReaderMsg::Failed { slot } => {
                if let Some(slot) = state.slots.get_mut(slot) {
                    slot.wanted = Wanted::Failed;
                }
            }
        }
        state.drop_if_unwanted();
        if state.done() {
            myself.stop(None);
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<ReaderMsg>,
        event: SupervisionEvent,
        state: &mut ReaderState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, boxed, _) => {
                state.child_stopped(cell.get_id(), boxed)
            }
            SupervisionEvent::ActorFailed(cell, error) => {
                // A choice actor's handlers return no error: it panicked.
                state.child_failed(cell.get_id(), format!("panicked: {error}"))
            }
            _ => {}
        }
        state.drop_if_unwanted();
        if state.done() {
            myself.stop(None);
        }
        Ok(())
    }
}

/// Starts a reader for upstream `k` of the completion, reading `input`.
pub(crate) fn spawn_reader(
    input: Input,
    idle: Option<std::time::Duration>,
    completion: &Arc<CompletionShared>,
    upstream: usize,
    expected: Option<u32>,
) -> Option<ActorRef<ReaderMsg>> {
    let args = ReaderArgs {
        input,
        idle,
        completion: completion.clone(),
        upstream,
        expected,
    };
    match ActorRuntime::spawn_instant(None, ReaderActor, args) {
        Ok((reader, _)) => Some(reader),
        Err(e) => {
            let mut state = completion.lock();
            let error = state.upstream_error(
                upstream,
                Error::from(ErrorDetail::ActorFailed {
                    choice: None,
                    message: format!("could not start the reader: {e}"),
                }),
            );
            state.end_upstream(upstream, Default::default(), Err(error));
            None
        }
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}
