//! The reader's state: its upstream, its splitter, its router and the choices' entries, and
//! what it does with them (poll the upstream, execute the router's commands, flush what a
//! read brought, end the stream). The actor in [`super`] feeds it its messages.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use choicewise_proto::driver::{
    Batch, CancelReason, ChoiceCore, Command, Refused, Router, Splitter, Step,
};
use choicewise_proto::{Error, ErrorDetail};
use ractor::ActorRef;

use super::super::choice::Running;
use super::super::flush::{Flush, FlushPolicy, retire_at};
use super::super::orphan::{list_unseen, orphan_of, publish_orphan, settle_all};
use super::super::wake::{PollWaker, QuietTimer};
use super::{panic_message, refused};
use crate::completion::{ChoiceEntry, CompletionShared};
use crate::log::{ChoiceLog, lock};
use crate::msg::{ChoiceMsg, ReaderMsg};
use crate::source::Upstream;

pub(crate) struct ReaderState {
    /// The upstream; `None` once dropped.
    pub(super) upstream_input: Option<Upstream>,
    pub(super) splitter: Splitter,
    pub(super) completion: Arc<CompletionShared>,
    pub(super) upstream: usize,
    /// One per splitter slot, in the same order: the choice's log and address.
    pub(super) entries: Vec<Arc<ChoiceEntry>>,
    /// The decisions: who holds each choice, which are wanted, what to send (one slot per
    /// entry).
    pub(super) router: Router<Running>,
    /// Replacements reserved when the upstream failed.
    pub(super) reserved: usize,
    pub(super) myself: ActorRef<ReaderMsg>,
    /// Wakes the reader through its mailbox.
    pub(super) poll: Arc<PollWaker>,
    pub(super) waker: Waker,
    /// The hibernation timer.
    pub(super) quiet: QuietTimer,
    /// When the last read came, for the hibernation timer.
    pub(super) last_read: tokio::time::Instant,
    #[cfg(feature = "diagnostics")]
    pub(super) _live: crate::diagnostics::LiveActor,
}

impl ReaderState {
    /// Polls the upstream once: routes what one read brought, or arms the timers and waits
    /// for the waker. A panic while reading or splitting (or in the upstream's own code)
    /// ends the stream with a typed error, after what was routed before it.
    pub(super) fn poll_upstream(&mut self) {
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
    pub(super) fn run(&mut self) {
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
    pub(super) fn flush(&mut self) {
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
                    .max_bytes(stream.max_choice_bytes)
                    .max_tokens(stream.max_choice_tokens)
                    .drop_after_finish(stream.drop_after_finish);
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
    pub(super) fn cancel(&mut self, slot: usize, reason: CancelReason) {
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
    pub(super) fn end(&mut self, outcome: Result<(), Error>) {
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
    pub(super) fn after(&mut self) {
        let splitter = &self.splitter;
        (self.router).after_input(|i| splitter.choice_finished(i));
        self.run();
    }

    /// What is left of the choice in `slot`, as its log published it.
    pub(super) fn orphans(
        entries: &[Arc<ChoiceEntry>],
    ) -> impl FnOnce(usize) -> Box<ChoiceCore> + '_ {
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
