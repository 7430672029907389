//! The reader actor: reads one upstream, routes every chunk's choices to their actors, and
//! supervises those actors. Its decisions are [`Router`]'s (no runtime): the actor polls the
//! upstream, feeds the router what happens, and executes the router's commands.
//!
//! The reader never waits on its upstream inside a handler. It polls the upstream with a
//! waker that sends it [`ReaderMsg::Poll`]: when the upstream is pending, the reader goes
//! back to its mailbox, free to handle a cancel or a supervision event at once, and the
//! upstream's readiness reaches it as the next message (one task wake-up, as an `await`
//! would cost). One read is split per message; its updates go at once to the choices whose
//! actors are idle, and to the busy ones with a later read (see `flush::FLUSH_BYTES`), when the
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
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use choicewise_proto::driver::{
    Batch, CancelReason, ChoiceCore, Command, Refused, Router, Splitter, Step,
};
use choicewise_proto::{Error, ErrorDetail};
use ractor::{Actor, ActorProcessingErr, ActorRef, ActorRuntime, SupervisionEvent};

use super::choice::{ChoiceActorState, Running};
use super::flush::{Flush, FlushPolicy, retire_at};
use super::orphan::{list_unseen, orphan_of, publish_orphan, settle_all};
use super::wake::{PollWaker, QuietTimer};
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

pub(crate) struct ReaderState {
    /// The upstream; `None` once dropped.
    upstream_input: Option<Upstream>,
    splitter: Splitter,
    completion: Arc<CompletionShared>,
    upstream: usize,
    /// One per splitter slot, in the same order: the choice's log and address.
    entries: Vec<Arc<ChoiceEntry>>,
    /// The decisions: who holds each choice, which are wanted, what to send (one slot per
    /// entry).
    router: Router<Running>,
    /// Replacements reserved when the upstream failed.
    reserved: usize,
    myself: ActorRef<ReaderMsg>,
    /// Wakes the reader through its mailbox.
    poll: Arc<PollWaker>,
    waker: Waker,
    /// The hibernation timer.
    quiet: QuietTimer,
    /// When the last read came, for the hibernation timer.
    last_read: tokio::time::Instant,
    #[cfg(feature = "diagnostics")]
    _live: crate::diagnostics::LiveActor,
}

impl ReaderState {
    /// Polls the upstream once: routes what one read brought, or arms the timers and waits
    /// for the waker. A panic while reading or splitting (or in the upstream's own code)
    /// ends the stream with a typed error, after what was routed before it.
    fn poll_upstream(&mut self) {
        self.poll.polling();
        if !self.router.is_reading() {
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
        if !self.router.any_live() {
            return;
        }
        let Some(due) = retire_at(self.last_read, self.completion.config.hibernate_after) else {
            return; // Never: the actors stay for the whole stream.
        };
        let mut cx = Context::from_waker(&self.waker);
        if self.quiet.elapsed(due, &mut cx) {
            self.router.quiet();
            self.run();
            self.router.release_buffers();
        }
    }

    /// Executes the router's commands, in order.
    fn run(&mut self) {
        while let Some(command) = self.router.next_command() {
            match command {
                Command::Spawn { slot, core } => self.spawn(slot, core),
                Command::Send { slot, msg } => {
                    let batch = matches!(msg, ChoiceMsg::Batch(_));
                    // Not sent if it died: its supervision event is on its way and will fail
                    // the choice.
                    let sent = (self.router.live(slot))
                        .is_some_and(|running| running.actor.send_message(msg).is_ok());
                    if !sent {
                        self.router.undelivered(slot, batch);
                    }
                }
                Command::Retire { slot } => {
                    let sent = (self.router.actor(slot))
                        .map(|running| running.actor.send_message(ChoiceMsg::Retire));
                    if let Some(Err(e)) = sent {
                        // It died: its supervision event is on its way.
                        tracing::trace!(slot, error = %e, "a retire not sent");
                    }
                }
                Command::PublishOrphan {
                    slot,
                    phase,
                    warning,
                } => {
                    if let Some(w) = warning {
                        self.completion.lock().warnings.push(w);
                    }
                    publish_orphan(&self.entries[slot].log, &phase);
                }
                Command::Reserve(failing) => {
                    self.reserved = self.completion.reserve_replacements(failing)
                }
                Command::DropUpstream => {
                    self.completion.lock().upstreams[self.upstream].dropped = true;
                    self.upstream_input = None;
                    self.end(Ok(()));
                }
                Command::Stop => self.myself.stop(None),
            }
        }
    }

    /// Starts a choice's actor with its state, and tells the router how it went.
    fn spawn(&mut self, slot: usize, core: Box<ChoiceCore>) {
        let log = &self.entries[slot].log;
        let told = match Running::start(core, log, &self.completion, &self.myself, slot) {
            Ok(running) => self.router.started(slot, running),
            Err(e) => {
                let orphan = Box::new(orphan_of(log));
                (self.router).start_failed(slot, orphan, format!("could not start: {e}"))
            }
        };
        refused(told, "a start", |_| false);
    }

    /// Publishes the choices the last read brought, sends every choice its updates, and
    /// publishes the warnings.
    fn flush(&mut self) {
        self.flush_to(Flush::All);
    }

    /// Publishes the choices the last read brought and the warnings, and sends the choices
    /// their updates, as `to` says.
    fn flush_to(&mut self, to: Flush) {
        let known = self.entries.len();
        let mut new_choices = Vec::new();
        if self.splitter.choice_count() > known {
            let indexes: Vec<u32> = {
                let mut state = self.completion.lock();
                (known..self.splitter.choice_count())
                    .map(|slot| state.global_index(self.upstream, self.splitter.choice_index(slot)))
                    .collect()
            };
            for index in indexes {
                let entry = Arc::new(ChoiceEntry {
                    log: Arc::new(ChoiceLog::new(index)),
                    addr: Some((self.myself.clone(), self.entries.len())),
                });
                new_choices.push(entry.clone());
                self.entries.push(entry);
                let stream = &self.completion.config.stream;
                let core = ChoiceCore::new(index, stream.max_tool_calls)
                    .logprobs(stream.logprobs)
                    .max_bytes(stream.max_choice_bytes);
                self.router.add(Box::new(core));
                self.run();
            }
        }
        // The finishes this read brought take their places in the finish order before any
        // of them reaches its choice: whoever learns a choice finished finds its place.
        {
            let mut finishes = self.splitter.take_finishes().peekable();
            if finishes.peek().is_some() {
                let mut state = self.completion.lock();
                for slot in finishes {
                    state.record_finish(self.entries[slot].index());
                }
            }
        }
        let policy = FlushPolicy::new(to, self.splitter.pending_bytes());
        for i in 0..self.entries.len() {
            if self.splitter.pending(i).is_empty() || !policy.sends(self.router.busy(i)) {
                continue; // Nothing, or its actor is busy: these go with the next ones.
            }
            let refill = match policy.refills() {
                true => (self.router.live(i))
                    .and_then(|running| lock(&running.handback.pool).take())
                    .unwrap_or_else(|| Batch::sized_like(self.splitter.pending(i))),
                false => Batch::default(),
            };
            let batch = self.splitter.take_pending(i, refill);
            refused(self.router.batch(i, batch), "a batch", |_| false);
            self.run();
        }
        self.router.cancel_new(known);
        self.run();
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

    /// Sends the choice in `slot` a cancel (after the updates sent before it), unless it is
    /// no longer wanted: closed already (failed, or cancelled by a close), or the stream is
    /// over.
    fn cancel(&mut self, slot: usize, reason: CancelReason) {
        let told = self.router.cancel(slot, reason);
        refused(told, "a cancel", |r| {
            matches!(
                r,
                Refused::AlreadyClosed(_) | Refused::Ended(_) | Refused::Draining
            )
        });
        self.run();
    }

    /// The stream is over: sends every choice what was read and then its end, lists the declared
    /// choices that never appeared, and records the upstream's end.
    fn end(&mut self, outcome: Result<(), Error>) {
        self.flush();
        let outcome = match outcome {
            Ok(()) => Ok(()),
            Err(e) => Err(self.completion.lock().upstream_error(self.upstream, e)),
        };
        let splitter = &self.splitter;
        let told = (self.router).end(outcome.clone(), |i| splitter.choice_finished(i));
        refused(told, "the end", |_| false);
        self.quiet.disarm();
        self.run();
        let reserved = std::mem::take(&mut self.reserved);
        let meta = self.splitter.take_meta();
        let mut state = self.completion.lock();
        let dropped = state.upstreams[self.upstream].dropped;
        let mut listed = false;
        if let Some(n) = (self.router.expected()).filter(|_| dropped || outcome.is_err()) {
            // Listed all the same, so that every choice asked for is accounted for.
            let seen = (0..self.splitter.choice_count())
                .map(|slot| self.splitter.choice_index(slot))
                .collect();
            listed = list_unseen(&mut state, self.upstream, n, &seen, dropped, &outcome);
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

    /// After each message: the upstream is dropped once no choice is wanted (what was routed
    /// is delivered, every choice ends cleanly); the reader stops once its work is done (the
    /// router's last command).
    fn after(&mut self) {
        let splitter = &self.splitter;
        (self.router).after_input(|i| splitter.choice_finished(i));
        self.run();
    }

    /// What is left of the choice in `slot`, as its log published it.
    fn orphans(entries: &[Arc<ChoiceEntry>]) -> impl FnOnce(usize) -> Box<ChoiceCore> + '_ {
        |slot| Box::new(orphan_of(&entries[slot].log))
    }
}

impl Drop for ReaderState {
    fn drop(&mut self) {
        if self.router.done() {
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
        settle_all(&self.entries, &error);
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
        let poll = Arc::new(PollWaker::new(myself.clone()));
        let closing = args.completion.closing_keep();
        Ok(ReaderState {
            upstream_input: Some(Upstream::new(args.input, args.idle)),
            splitter: Splitter::new(&config.stream),
            upstream: args.upstream,
            completion: args.completion,
            entries: Vec::new(),
            router: Router::new(args.expected, closing),
            reserved: 0,
            myself,
            waker: Waker::from(poll.clone()),
            poll,
            quiet: QuietTimer::default(),
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
        state.after();
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<ReaderMsg>,
        message: ReaderMsg,
        state: &mut ReaderState,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(message, ReaderMsg::Poll) {
            // What was read before a cancel or a close reaches its choices before it.
            state.flush();
        }
        match message {
            ReaderMsg::Poll => state.poll_upstream(),
            ReaderMsg::Cancel { slot, reason } => state.cancel(slot, reason),
            ReaderMsg::Close { keep } => {
                let splitter = &state.splitter;
                let told = (state.router).close(keep, |slot| splitter.choice_finished(slot));
                // A close after the stream's end changes nothing.
                refused(told, "a close", |r| r == Refused::Draining);
                state.run();
            }
            ReaderMsg::Failed { slot, bounded } => {
                // Cancelled before (the cancel reached the actor after the update that
                // failed it), or told of its end already: nothing more to stop.
                let told = state.router.failed(slot);
                refused(told, "a failure", |r| {
                    matches!(r, Refused::AlreadyClosed(_) | Refused::Ended(_))
                });
                if bounded {
                    state.router.failed_at_bound();
                }
            }
        }
        state.after();
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<ReaderMsg>,
        event: SupervisionEvent,
        state: &mut ReaderState,
    ) -> Result<(), ActorProcessingErr> {
        let orphans = ReaderState::orphans(&state.entries);
        let told = match event {
            SupervisionEvent::ActorTerminated(cell, boxed, _) => {
                let core = boxed
                    .and_then(|mut s| s.take::<ChoiceActorState>().ok())
                    .map(|s| s.core);
                state.router.child_stopped(cell.get_id(), core, orphans)
            }
            // A choice actor's handlers return no error: it panicked.
            SupervisionEvent::ActorFailed(cell, error) => {
                let message = format!("panicked: {error}");
                state.router.child_failed(cell.get_id(), message, orphans)
            }
            _ => {
                drop(orphans);
                Ok(())
            }
        };
        refused(told, "a child's end", |_| false);
        state.run();
        state.after();
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

/// A refusal of the router: those `race` allows come from races the design allows (a
/// cancel after the choice closed, ...) and are traced; any other is the reader's mistake,
/// traced and a debug assertion.
fn refused(told: Result<(), Refused>, input: &'static str, race: impl Fn(Refused) -> bool) {
    let Err(refused) = told else {
        return;
    };
    if race(refused) {
        tracing::trace!(
            input,
            ?refused,
            "the router refused an input that lost a race"
        );
    } else {
        tracing::warn!(input, ?refused, "the router refused an input");
        debug_assert!(false, "the router refused {input}: {refused:?}");
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
