//! The reader's decisions, as a synchronous state machine with no runtime (no tokio, no
//! ractor): which choice holds its state where, which choices are still wanted, when the
//! upstream is no longer worth reading, what a choice's actor is sent and when, what becomes
//! of a choice whose actor died. The reader actor feeds it inputs (a choice appeared, its
//! updates, a cancel with its reason, a choice failed, the upstream's end, a child stopped
//! or panicked, a quiet period) and executes the [`Command`]s it queues (spawn, send, retire,
//! publish an orphan, reserve replacements, drop the upstream, stop). The unit tests below
//! drive it through random interleavings with a model of the actors, without a runtime.
//!
//! One choice as the router sees it is a [`Slot`]: who holds its state ([`Held`]) and where
//! it is in its life as far as routing goes ([`Life`]; the reason for a cancel is part of
//! its closed state). Each is one enum whose transitions are methods of one `impl`, each
//! refusing ([`Refused`]) a transition that is not allowed.
//!
//! ```text
//! Held:
//!  add ─▶ Starting ──started──▶ Live ──quiet──▶ Retiring{pending} ──stopped, state back──▶ Retired
//!           ▲   │                │ │                 │                                        │
//!           │   │ start failed   │ └─stopped settled (after its end)──▶ Gone                  │
//!           │   ▼                ▼                   ▼                                        │
//!           │  Orphaned(core) ◀──── panicked, or stopped unsettled                            │
//!           │  (the reader settles it at the end)                                             │
//!           └──────────────── a message comes, or messages waited ────────────────────────────┘
//!
//! Life:  Open ──cancel(reason)──▶ Closed(Cancelled(Asked | LowConfidence | Closing))
//!          └──its update or its actor failed──▶ Closed(Failed)
//!        Open | Closed(_) ──the upstream's end sent──▶ Ended   (nothing is routed after it)
//! ```

use std::collections::VecDeque;
use std::sync::Arc;

use choicewise_proto::driver::{Batch, ChoiceCore, Phase};
use choicewise_proto::{Error, ErrorDetail, Warning};

pub(crate) use crate::msg::CancelReason;
use crate::msg::ChoiceMsg;

/// What the router needs of a running choice actor (the reader's actor handle; a model in
/// the tests).
pub(crate) trait Child {
    /// How a supervision event names the actor.
    type Id: Copy + PartialEq;
    fn id(&self) -> Self::Id;
    /// How many batches the actor has applied (it counts them itself).
    fn applied(&self) -> u64;
}

/// Why a choice's updates are no longer wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    Cancelled(CancelReason),
    /// Its own update, or its actor, failed.
    Failed,
}

/// Where a choice is in its life, as far as routing goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Life {
    /// Its updates are wanted.
    Open,
    /// Its updates are no longer wanted; its actor still gets the upstream's end.
    Closed(Cause),
    /// It was sent the upstream's end: nothing more is routed to it.
    Ended,
}

/// A transition that is not allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No such slot.
    NoSlot(usize),
    /// No slot's actor has this id (a stale supervision event).
    UnknownChild,
    /// The choice was already closed (or ended): a second cancel or failure changes nothing.
    AlreadyClosed(usize),
    /// The choice was sent the upstream's end: nothing more goes to it.
    Ended(usize),
    /// The slot is not in the state the input assumes (e.g. `started` for a slot not
    /// starting).
    NotStarting(usize),
    /// The stream is over: the upstream's end was handled already.
    Draining,
}

/// Who holds a choice's state.
#[derive(Debug)]
pub(crate) enum Held<A> {
    /// Its actor is being started; what came for the choice meanwhile goes to it once
    /// started, in order.
    Starting { pending: Vec<ChoiceMsg> },
    /// Its actor runs; `sent`: the batches sent to it.
    Live { actor: A, sent: u64 },
    /// Its actor was asked to retire; its state comes back with the actor's stop, and what
    /// comes for the choice meanwhile waits here (nothing is sent to a retiring actor).
    Retiring { actor: A, pending: Vec<ChoiceMsg> },
    /// The reader holds its state while the upstream is quiet; the next message starts an
    /// actor with it.
    Retired(Box<ChoiceCore>),
    /// Its actor died (or never started): the reader holds what is left of it.
    Orphaned(Box<ChoiceCore>),
    /// Nobody: its actor settled the choice and stopped.
    Gone,
}

/// One choice as the router sees it.
#[derive(Debug)]
pub(crate) struct Slot<A> {
    /// The choice's index in the completion.
    pub index: u32,
    pub held: Held<A>,
    pub life: Life,
}

impl Life {
    /// A cancel: `Open → Closed(Cancelled(reason))`.
    fn cancel(&mut self, slot: usize, reason: CancelReason) -> Result<(), Refused> {
        match self {
            Life::Open => {
                *self = Life::Closed(Cause::Cancelled(reason));
                Ok(())
            }
            Life::Closed(_) => Err(Refused::AlreadyClosed(slot)),
            Life::Ended => Err(Refused::Ended(slot)),
        }
    }

    /// A failure: `Open → Closed(Failed)`; the first cause is kept.
    fn fail(&mut self, slot: usize) -> Result<(), Refused> {
        match self {
            Life::Open => {
                *self = Life::Closed(Cause::Failed);
                Ok(())
            }
            Life::Closed(_) => Err(Refused::AlreadyClosed(slot)),
            Life::Ended => Err(Refused::Ended(slot)),
        }
    }

    /// The upstream's end sent: `Open | Closed(_) → Ended`.
    fn end(&mut self, slot: usize) -> Result<(), Refused> {
        match self {
            Life::Ended => Err(Refused::Ended(slot)),
            _ => {
                *self = Life::Ended;
                Ok(())
            }
        }
    }

    /// Whether its updates are still wanted.
    pub fn wanted(&self) -> bool {
        matches!(self, Life::Open)
    }
}

/// What the reader is to do, in order.
#[derive(Debug)]
pub(crate) enum Command {
    /// Start an actor for the slot with this state (linked to the reader); report
    /// [`Router::started`] or [`Router::start_failed`].
    Spawn { slot: usize, core: Box<ChoiceCore> },
    /// Send the slot's actor ([`Router::actor`]) this message; report
    /// [`Router::undelivered`] if it could not be sent.
    Send { slot: usize, msg: ChoiceMsg },
    /// Ask the slot's actor to retire.
    Retire { slot: usize },
    /// Publish the phase of a choice whose actor is gone (the reader taking its log over),
    /// after the warning, if any.
    PublishOrphan {
        slot: usize,
        phase: Phase,
        warning: Option<Warning>,
    },
    /// Reserve replacements for this many failed choices (before they learn of the failure).
    Reserve(usize),
    /// No choice is wanted: drop the upstream (closing its connection) and end the stream.
    DropUpstream,
    /// The stream is over and every choice settled: stop.
    Stop,
}

/// Where the reader is in its life.
///
/// ```text
/// Reading { closing: None } ──close(keep)──▶ Reading { closing: Some(keep) }
///        └──────── the stream ends, or no choice is wanted ────────▶ Draining ──last child ended──▶ Stop
/// ```
#[derive(Debug)]
enum ReaderPhase {
    /// Reading the upstream; `closing`: every choice, and every choice still to appear, is
    /// unwanted but those kept (indexes of the completion).
    Reading { closing: Option<Arc<[u32]>> },
    /// The stream is over and every choice was told how (after its updates).
    Draining(Result<(), Error>),
}

/// The reader's decisions for one upstream (see the module's doc).
#[derive(Debug)]
pub(crate) struct Router<A> {
    slots: Vec<Slot<A>>,
    phase: ReaderPhase,
    /// A choice of this upstream was cancelled: the upstream may be dropped once no choice
    /// is wanted (see [`Router::unwanted`]).
    cancelled_any: bool,
    /// A choice of this upstream failed at its bound of bytes: likewise.
    bounded_any: bool,
    /// How many choices the upstream will have, when known.
    expected: Option<u32>,
    /// The upstream was dropped because no choice was wanted.
    dropped: bool,
    stopped: bool,
    out: VecDeque<Command>,
}

impl<A: Child> Router<A> {
    pub fn new(expected: Option<u32>, closing: Option<Arc<[u32]>>) -> Self {
        Router {
            slots: Vec::new(),
            phase: ReaderPhase::Reading { closing },
            cancelled_any: false,
            bounded_any: false,
            expected,
            dropped: false,
            stopped: false,
            out: VecDeque::new(),
        }
    }

    /// The next command to execute.
    pub fn next_command(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// Frees the command queue's buffer once it is empty (the upstream went quiet: an idle
    /// reader holds no more than it must).
    pub fn release_buffers(&mut self) {
        if self.out.is_empty() {
            self.out = VecDeque::new();
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    #[cfg(test)]
    pub fn slot(&self, slot: usize) -> Option<&Slot<A>> {
        self.slots.get(slot)
    }

    /// The slot's actor, while it runs (live or retiring).
    pub fn actor(&self, slot: usize) -> Option<&A> {
        match &self.slots.get(slot)?.held {
            Held::Live { actor, .. } | Held::Retiring { actor, .. } => Some(actor),
            _ => None,
        }
    }

    /// The slot's actor, while it is live (not retiring).
    pub fn live(&self, slot: usize) -> Option<&A> {
        match &self.slots.get(slot)?.held {
            Held::Live { actor, .. } => Some(actor),
            _ => None,
        }
    }

    /// The orphan the reader holds for the slot.
    #[cfg(test)]
    pub fn orphan(&self, slot: usize) -> Option<&ChoiceCore> {
        match &self.slots.get(slot)?.held {
            Held::Orphaned(core) => Some(core),
            _ => None,
        }
    }

    /// The completion is closing: the indexes kept, while reading.
    pub fn closing(&self) -> Option<&Arc<[u32]>> {
        match &self.phase {
            ReaderPhase::Reading { closing } => closing.as_ref(),
            ReaderPhase::Draining(_) => None,
        }
    }

    pub fn is_reading(&self) -> bool {
        matches!(self.phase, ReaderPhase::Reading { .. })
    }

    /// How many choices the upstream will have, when known.
    pub fn expected(&self) -> Option<u32> {
        self.expected
    }

    /// Whether a choice actor runs (not retiring): the quiet timer is armed only then.
    pub fn any_live(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s.held, Held::Live { .. }))
    }

    /// Whether the slot's updates should wait: its actor has batches still to apply, or it
    /// is retiring.
    pub fn busy(&self, slot: usize) -> bool {
        match self.slots.get(slot).map(|s| &s.held) {
            Some(Held::Live { actor, sent }) => actor.applied() < *sent,
            Some(Held::Retiring { .. }) => true,
            _ => false,
        }
    }

    /// A choice appeared: its slot, its actor to be started with `core`.
    pub fn add(&mut self, core: Box<ChoiceCore>) -> usize {
        let slot = self.slots.len();
        self.slots.push(Slot {
            index: core.index(),
            held: Held::Starting {
                pending: Vec::new(),
            },
            life: Life::Open,
        });
        self.out.push_back(Command::Spawn { slot, core });
        slot
    }

    /// The slot's actor started: the message that waited for it goes to it.
    pub fn started(&mut self, slot: usize, actor: A) -> Result<(), Refused> {
        let s = self.slots.get_mut(slot).ok_or(Refused::NoSlot(slot))?;
        let Held::Starting { pending } = &mut s.held else {
            return Err(Refused::NotStarting(slot));
        };
        let pending = std::mem::take(pending);
        s.held = Held::Live { actor, sent: 0 };
        for msg in pending {
            self.route(slot, msg);
        }
        Ok(())
    }

    /// The slot's actor could not start (`message` says why): the reader holds `orphan`
    /// (what its log published), failed; the message that waited for it goes to it.
    pub fn start_failed(
        &mut self,
        slot: usize,
        mut orphan: Box<ChoiceCore>,
        message: String,
    ) -> Result<(), Refused> {
        let s = self.slots.get_mut(slot).ok_or(Refused::NoSlot(slot))?;
        let Held::Starting { pending } = &mut s.held else {
            return Err(Refused::NotStarting(slot));
        };
        let pending = std::mem::take(pending);
        orphan.fail(Error::from(ErrorDetail::ActorFailed {
            choice: Some(orphan.index()),
            message,
        }));
        self.out.push_back(Command::PublishOrphan {
            slot,
            phase: orphan.phase().clone(),
            warning: None,
        });
        s.held = Held::Orphaned(orphan);
        for msg in pending {
            self.route(slot, msg);
        }
        Ok(())
    }

    /// The choice's updates of one read.
    pub fn batch(&mut self, slot: usize, batch: Batch) -> Result<(), Refused> {
        match self.slots.get(slot).ok_or(Refused::NoSlot(slot))?.life {
            Life::Ended => Err(Refused::Ended(slot)),
            _ => {
                self.route(slot, ChoiceMsg::Batch(batch));
                Ok(())
            }
        }
    }

    /// A cancel of the choice, for `reason`: sent to it after the updates sent before.
    pub fn cancel(&mut self, slot: usize, reason: CancelReason) -> Result<(), Refused> {
        if !self.is_reading() {
            return Err(Refused::Draining);
        }
        let s = self.slots.get_mut(slot).ok_or(Refused::NoSlot(slot))?;
        self.cancelled_any = true;
        s.life.cancel(slot, reason)?;
        self.route(slot, ChoiceMsg::Cancel);
        Ok(())
    }

    /// A choice failed at its bound of bytes (`max_choice_bytes`): an upstream that would
    /// send it without end. Once no other choice is wanted the upstream is dropped, as after
    /// a cancel, rather than read to its end for its usage.
    pub fn failed_at_bound(&mut self) {
        self.bounded_any = true;
    }

    /// The choice failed on its own (its actor says so): its updates are no longer wanted.
    pub fn failed(&mut self, slot: usize) -> Result<(), Refused> {
        let s = self.slots.get_mut(slot).ok_or(Refused::NoSlot(slot))?;
        s.life.fail(slot)
    }

    /// [`Completions::cancel`](crate::Completions::cancel): every choice, and every choice
    /// still to appear, is unwanted but those kept (indexes of the completion); those not
    /// finished (`finished`) are cancelled now.
    pub fn close(
        &mut self,
        keep: Arc<[u32]>,
        finished: impl Fn(usize) -> bool,
    ) -> Result<(), Refused> {
        let ReaderPhase::Reading { closing } = &mut self.phase else {
            return Err(Refused::Draining);
        };
        *closing = Some(keep.clone());
        for slot in 0..self.slots.len() {
            if !finished(slot) && !keep.contains(&self.slots[slot].index) {
                let _ = self.cancel(slot, CancelReason::Closing);
            }
        }
        Ok(())
    }

    /// While the completion is closing, the choices from slot `from` on (new with the last
    /// read, after their first updates) are cancelled but those kept.
    pub fn cancel_new(&mut self, from: usize) {
        let Some(keep) = self.closing().cloned() else {
            return;
        };
        for slot in from..self.slots.len() {
            if !keep.contains(&self.slots[slot].index) {
                let _ = self.cancel(slot, CancelReason::Closing);
            }
        }
    }

    /// The upstream went quiet: every live actor retires.
    pub fn quiet(&mut self) {
        for (slot, s) in self.slots.iter_mut().enumerate() {
            if matches!(s.held, Held::Live { .. }) {
                let Held::Live { actor, .. } = std::mem::replace(&mut s.held, Held::Gone) else {
                    unreachable!()
                };
                s.held = Held::Retiring {
                    actor,
                    pending: Vec::new(),
                };
                self.out.push_back(Command::Retire { slot });
            }
        }
    }

    /// A message could not be sent to the slot's actor (it died: its supervision event is
    /// on its way and will fail the choice): a batch it was counted for is not.
    pub fn undelivered(&mut self, slot: usize, batch: bool) {
        if let Some(Slot {
            held: Held::Live { sent, .. },
            ..
        }) = self.slots.get_mut(slot)
            && batch
        {
            *sent -= 1;
        }
    }

    /// Routes a message to the slot's holder: sent to a live actor, held for a retiring one,
    /// an actor started for a retired choice, applied here to an orphan.
    fn route(&mut self, slot: usize, msg: ChoiceMsg) {
        let s = &mut self.slots[slot];
        match &mut s.held {
            Held::Live { sent, .. } => {
                if matches!(msg, ChoiceMsg::Batch(_)) {
                    *sent += 1;
                }
                self.out.push_back(Command::Send { slot, msg });
            }
            Held::Retiring { pending, .. } => pending.push(msg),
            Held::Starting { pending } => pending.push(msg),
            Held::Retired(_) => {
                let starting = Held::Starting { pending: vec![msg] };
                let Held::Retired(core) = std::mem::replace(&mut s.held, starting) else {
                    unreachable!()
                };
                self.out.push_back(Command::Spawn { slot, core });
            }
            Held::Orphaned(orphan) => match msg {
                ChoiceMsg::Batch(batch) => orphan.ignored(batch.len() as u64, batch.first_line()),
                // Settled already (its end waited for an actor that died, and came again):
                // its log takes no more writes.
                ChoiceMsg::End(_) if orphan.phase().is_settled() => {}
                ChoiceMsg::End(outcome) => {
                    let warning = orphan.settle(outcome, &mut Vec::new());
                    self.out.push_back(Command::PublishOrphan {
                        slot,
                        phase: orphan.phase().clone(),
                        warning,
                    });
                }
                ChoiceMsg::Cancel | ChoiceMsg::Retire => {}
            },
            Held::Gone => {}
        }
    }

    /// The slot whose actor has this id.
    fn slot_of(&self, id: A::Id) -> Option<usize> {
        self.slots.iter().position(|s| match &s.held {
            Held::Live { actor, .. } | Held::Retiring { actor, .. } => actor.id() == id,
            _ => false,
        })
    }

    /// A choice actor stopped with its state (`None`: killed, or its state lost): after its
    /// end (the choice settled), or retired (its state kept for the next actor, or handed to
    /// one at once if messages wait). Stopped otherwise, it failed: see [`child_failed`].
    /// `orphan`: what the slot's log published, should the reader take the choice over.
    ///
    /// [`child_failed`]: Self::child_failed
    pub fn child_stopped(
        &mut self,
        id: A::Id,
        core: Option<Box<ChoiceCore>>,
        orphan: impl FnOnce(usize) -> Box<ChoiceCore>,
    ) -> Result<(), Refused> {
        let slot = self.slot_of(id).ok_or(Refused::UnknownChild)?;
        let held = std::mem::replace(&mut self.slots[slot].held, Held::Gone);
        match (held, core) {
            (Held::Retiring { pending, .. }, Some(core)) if pending.is_empty() => {
                self.slots[slot].held = Held::Retired(core);
            }
            // What waited goes to a new actor, in order.
            (Held::Retiring { pending, .. }, Some(core)) => {
                self.slots[slot].held = Held::Starting { pending };
                self.out.push_back(Command::Spawn { slot, core });
            }
            (_, Some(core)) if core.phase().is_settled() => {}
            // Killed, or stopped with its choice unsettled: nothing else stops one.
            (held, _) => {
                self.slots[slot].held = held;
                self.fail_child(
                    slot,
                    "the choice's actor stopped before the stream ended".to_string(),
                    orphan,
                );
            }
        }
        Ok(())
    }

    /// A choice actor failed (a panic, `message`): its choice fails alone; the reader takes
    /// over `orphan`, what the slot's log published.
    pub fn child_failed(
        &mut self,
        id: A::Id,
        message: String,
        orphan: impl FnOnce(usize) -> Box<ChoiceCore>,
    ) -> Result<(), Refused> {
        let slot = self.slot_of(id).ok_or(Refused::UnknownChild)?;
        self.fail_child(slot, message, orphan);
        Ok(())
    }

    fn fail_child(
        &mut self,
        slot: usize,
        message: String,
        orphan: impl FnOnce(usize) -> Box<ChoiceCore>,
    ) {
        let mut orphan = orphan(slot);
        orphan.fail(Error::from(ErrorDetail::ActorFailed {
            choice: Some(orphan.index()),
            message,
        }));
        self.out.push_back(Command::PublishOrphan {
            slot,
            phase: orphan.phase().clone(),
            warning: None,
        });
        let s = &mut self.slots[slot];
        let pending = match std::mem::replace(&mut s.held, Held::Orphaned(orphan)) {
            Held::Retiring { pending, .. } => pending,
            _ => Vec::new(),
        };
        // An ended choice stays ended; a cancelled one counts as failed from now.
        if s.life != Life::Ended {
            s.life = Life::Closed(Cause::Failed);
        }
        for msg in pending {
            self.route(slot, msg);
        }
        if let ReaderPhase::Draining(outcome) = &self.phase {
            // Its end was lost with it.
            let outcome = outcome.clone();
            self.route(slot, ChoiceMsg::End(outcome));
        }
    }

    /// How many of this upstream's choices its failure fails: those still wanted and not
    /// finished (`finished`: the stream finished the slot's choice), and the declared ones
    /// that never appeared.
    pub fn failing(&self, finished: impl Fn(usize) -> bool) -> usize {
        let open = (self.slots.iter().enumerate())
            .filter(|(i, s)| s.life.wanted() && !finished(*i))
            .count();
        let missing = self
            .expected
            .map_or(0, |n| (n as usize).saturating_sub(self.slots.len()));
        open + missing
    }

    /// Whether no choice of this upstream is wanted any more: the completion is closing, or
    /// at least one choice was cancelled or failed at its bound of bytes and every expected
    /// choice has appeared; and each has finished (`finished`), failed or been cancelled.
    pub fn unwanted(&self, finished: impl Fn(usize) -> bool) -> bool {
        let ReaderPhase::Reading { closing } = &self.phase else {
            return false;
        };
        if closing.is_none()
            && (!(self.cancelled_any || self.bounded_any)
                || self.expected.is_some_and(|n| self.slots.len() < n as usize))
        {
            return false;
        }
        (self.slots.iter().enumerate()).all(|(i, s)| finished(i) || !s.life.wanted())
    }

    /// Queues [`Command::DropUpstream`] when no choice is wanted; the reader then ends the
    /// stream cleanly ([`end`](Self::end)).
    pub fn drop_if_unwanted(&mut self, finished: impl Fn(usize) -> bool) -> bool {
        if !self.unwanted(finished) {
            return false;
        }
        self.dropped = true;
        self.out.push_back(Command::DropUpstream);
        true
    }

    /// The stream is over (`outcome`, the upstream's error already recorded): replacements
    /// are reserved for a failure (before the choices learn of it: a pick that counts them
    /// then counts the replacements too), then every choice is sent its end, after its
    /// updates.
    pub fn end(
        &mut self,
        outcome: Result<(), Error>,
        finished: impl Fn(usize) -> bool,
    ) -> Result<(), Refused> {
        if !self.is_reading() {
            return Err(Refused::Draining);
        }
        if outcome.is_err() && !self.dropped {
            let failing = self.failing(finished);
            self.out.push_back(Command::Reserve(failing));
        }
        self.phase = ReaderPhase::Draining(outcome.clone());
        for slot in 0..self.slots.len() {
            // Each slot ends once: the phase is `Reading` until here.
            let _ = self.slots[slot].life.end(slot);
            self.route(slot, ChoiceMsg::End(outcome.clone()));
        }
        Ok(())
    }

    /// Whether the reader's work is done: the stream is over and every choice has settled
    /// (its actor stopped, or the reader holds it).
    pub fn done(&self) -> bool {
        matches!(self.phase, ReaderPhase::Draining(_))
            && self
                .slots
                .iter()
                .all(|s| matches!(s.held, Held::Gone | Held::Orphaned(_)))
    }

    /// Queues [`Command::Stop`] once the work is done.
    pub fn stop_if_done(&mut self) {
        if !self.stopped && self.done() {
            self.stopped = true;
            self.out.push_back(Command::Stop);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The router driven through random interleavings of reads, cancels, failures, panics,
    //! retirements and the upstream's end, with a model of the choice actors and their logs
    //! (no runtime): every choice settles once, nothing is sent to a retiring or stopped
    //! actor, nothing is routed to a choice after its end nor written to its log after it
    //! settled, replacements are reserved once.

    use std::cell::Cell;
    use std::collections::{BTreeMap, VecDeque};
    use std::rc::Rc;

    use proptest::prelude::*;

    use super::*;

    struct Fake {
        id: u64,
        applied: Rc<Cell<u64>>,
    }

    impl Child for Fake {
        type Id = u64;
        fn id(&self) -> u64 {
            self.id
        }
        fn applied(&self) -> u64 {
            self.applied.get()
        }
    }

    /// A choice actor as the model runs it.
    struct ModelActor {
        slot: usize,
        core: Option<Box<ChoiceCore>>,
        mailbox: VecDeque<ChoiceMsg>,
        applied: Rc<Cell<u64>>,
        /// The log's writer epoch it was started with.
        epoch: u64,
        retire_asked: bool,
        /// Stopped (ended, retired, panicked or killed): what is sent to it is lost.
        stopped: bool,
    }

    /// What reaches the reader's mailbox.
    enum Input {
        Stopped(u64, Option<Box<ChoiceCore>>),
        Panicked(u64),
        Failed(usize),
        Cancel(usize, CancelReason),
        Close(Arc<[u32]>),
    }

    #[derive(Debug, Clone)]
    enum Op {
        Appear,
        Batch(usize),
        Finish(usize),
        Cancel(usize, u8),
        Close(u8),
        /// An actor handles its next message; a batch carries a bad update when `true`.
        Deliver(usize, bool),
        Inbox,
        Quiet,
        Panic(usize),
        Kill(usize),
        SpawnFails(bool),
        End(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => Just(Op::Appear),
            4 => any::<usize>().prop_map(Op::Batch),
            1 => any::<usize>().prop_map(Op::Finish),
            2 => (any::<usize>(), 0..3u8).prop_map(|(s, r)| Op::Cancel(s, r)),
            1 => any::<u8>().prop_map(Op::Close),
            6 => (any::<usize>(), prop::bool::weighted(0.1)).prop_map(|(a, f)| Op::Deliver(a, f)),
            5 => Just(Op::Inbox),
            2 => Just(Op::Quiet),
            1 => any::<usize>().prop_map(Op::Panic),
            1 => any::<usize>().prop_map(Op::Kill),
            1 => prop::bool::weighted(0.2).prop_map(Op::SpawnFails),
            1 => any::<bool>().prop_map(Op::End),
        ]
    }

    struct Model {
        router: Router<Fake>,
        actors: BTreeMap<u64, ModelActor>,
        next_id: u64,
        inbox: VecDeque<Input>,
        finished: Vec<bool>,
        /// Each slot's log: the phase published, its writer epoch, how often it settled.
        published: Vec<Phase>,
        epochs: Vec<u64>,
        settles: Vec<u32>,
        end_sent: Vec<u32>,
        cancel_sent: Vec<u32>,
        reserves: u32,
        drops: u32,
        stops: u32,
        spawn_fails: bool,
        violations: Vec<String>,
    }

    fn error() -> Error {
        Error::from(ErrorDetail::ActorFailed {
            choice: None,
            message: "model".to_string(),
        })
    }

    impl Model {
        fn new(expected: Option<u32>) -> Self {
            Model {
                router: Router::new(expected, None),
                actors: BTreeMap::new(),
                next_id: 0,
                inbox: VecDeque::new(),
                finished: Vec::new(),
                published: Vec::new(),
                epochs: Vec::new(),
                settles: Vec::new(),
                end_sent: Vec::new(),
                cancel_sent: Vec::new(),
                reserves: 0,
                drops: 0,
                stops: 0,
                spawn_fails: false,
                violations: Vec::new(),
            }
        }

        fn publish(&mut self, slot: usize, phase: Phase) {
            if self.published[slot].is_settled() {
                // A settled log would refuse it; nothing should try.
                self.violations
                    .push(format!("a write to slot {slot} after it settled"));
                return;
            }
            if phase.is_settled() {
                self.settles[slot] += 1;
            }
            self.published[slot] = phase;
        }

        /// Executes the router's commands, as the reader does.
        fn run(&mut self) {
            while let Some(command) = self.router.next_command() {
                match command {
                    Command::Spawn { slot, core } => {
                        self.epochs[slot] += 1;
                        if self.spawn_fails {
                            let orphan = Box::new(ChoiceCore::orphan(
                                slot as u32,
                                self.published[slot].clone(),
                            ));
                            self.router
                                .start_failed(slot, orphan, "could not start".into())
                                .unwrap();
                        } else {
                            let id = self.next_id;
                            self.next_id += 1;
                            let applied = Rc::new(Cell::new(0));
                            self.actors.insert(
                                id,
                                ModelActor {
                                    slot,
                                    core: Some(core),
                                    mailbox: VecDeque::new(),
                                    applied: applied.clone(),
                                    epoch: self.epochs[slot],
                                    retire_asked: false,
                                    stopped: false,
                                },
                            );
                            self.router.started(slot, Fake { id, applied }).unwrap();
                        }
                    }
                    Command::Send { slot, msg } => {
                        let Some(id) = self.router.live(slot).map(|a| a.id) else {
                            self.violations
                                .push(format!("a send to slot {slot}, not live"));
                            continue;
                        };
                        match &msg {
                            ChoiceMsg::End(_) => self.end_sent[slot] += 1,
                            ChoiceMsg::Cancel => self.cancel_sent[slot] += 1,
                            ChoiceMsg::Retire => {
                                self.violations.push("a retire sent as a message".into())
                            }
                            ChoiceMsg::Batch(_) => {}
                        }
                        if self.end_sent[slot] > 1 || self.cancel_sent[slot] > 1 {
                            self.violations.push(format!("slot {slot} told twice"));
                        }
                        if self.end_sent[slot] > 0 && !matches!(msg, ChoiceMsg::End(_)) {
                            self.violations
                                .push(format!("a write to slot {slot} after its end"));
                        }
                        let actor = self.actors.get_mut(&id).unwrap();
                        if actor.retire_asked {
                            self.violations
                                .push(format!("a send to slot {slot}'s retiring actor"));
                        }
                        if actor.stopped {
                            let batch = matches!(msg, ChoiceMsg::Batch(_));
                            self.router.undelivered(slot, batch);
                        } else {
                            actor.mailbox.push_back(msg);
                        }
                    }
                    Command::Retire { slot } => {
                        let Some(Slot {
                            held: Held::Retiring { actor, .. },
                            ..
                        }) = self.router.slot(slot)
                        else {
                            self.violations
                                .push(format!("a retire to slot {slot}, not retiring"));
                            continue;
                        };
                        let actor = self.actors.get_mut(&actor.id).unwrap();
                        actor.retire_asked = true;
                        if !actor.stopped {
                            actor.mailbox.push_back(ChoiceMsg::Retire);
                        }
                    }
                    Command::PublishOrphan { slot, phase, .. } => {
                        self.epochs[slot] += 1;
                        self.publish(slot, phase);
                    }
                    Command::Reserve(_) => self.reserves += 1,
                    Command::DropUpstream => {
                        self.drops += 1;
                        let finished = self.finished.clone();
                        self.router.end(Ok(()), |s| finished[s]).unwrap();
                    }
                    Command::Stop => {
                        self.stops += 1;
                        if !self.router.done() {
                            self.violations.push("stopped before done".into());
                        }
                    }
                }
            }
        }

        /// What the reader does after each input.
        fn after_input(&mut self) {
            self.run();
            let finished = self.finished.clone();
            self.router.drop_if_unwanted(|s| finished[s]);
            self.run();
            self.router.stop_if_done();
            self.run();
        }

        fn cancel(&mut self, slot: usize, reason: CancelReason) {
            let _ = self.router.cancel(slot, reason);
        }

        fn handle_input(&mut self, input: Input) {
            let published = &self.published;
            let orphan = |s: usize| Box::new(ChoiceCore::orphan(s as u32, published[s].clone()));
            let _ = match input {
                Input::Stopped(id, core) => self.router.child_stopped(id, core, orphan),
                Input::Panicked(id) => self.router.child_failed(id, "panicked".into(), orphan),
                Input::Failed(slot) => self.router.failed(slot),
                Input::Cancel(slot, reason) => {
                    self.cancel(slot, reason);
                    Ok(())
                }
                Input::Close(keep) => {
                    let finished = &self.finished;
                    self.router.close(keep, |s| finished[s])
                }
            };
            self.after_input();
        }

        /// An actor handles its next message.
        fn deliver(&mut self, id: u64, bad: bool) {
            let actor = self.actors.get_mut(&id).unwrap();
            let Some(msg) = actor.mailbox.pop_front() else {
                return;
            };
            let slot = actor.slot;
            let core = actor.core.as_mut().unwrap();
            let was_open = matches!(core.phase(), Phase::Open);
            let mut stop = false;
            match msg {
                ChoiceMsg::Batch(_) => {
                    if bad {
                        core.fail(error());
                    }
                    actor.applied.set(actor.applied.get() + 1);
                }
                ChoiceMsg::Cancel => {
                    core.cancel(&mut Vec::new());
                }
                ChoiceMsg::End(outcome) => {
                    core.settle(outcome, &mut Vec::new());
                    stop = true;
                }
                ChoiceMsg::Retire => {
                    core.release_buffers();
                    stop = true;
                    if !actor.mailbox.is_empty() {
                        self.violations
                            .push(format!("slot {slot}'s actor got messages after its retire"));
                    }
                }
            }
            let phase = core.phase().clone();
            let failed_now = was_open
                && matches!(
                    phase.closed(),
                    Some(choicewise_proto::driver::Closed::Failed(_))
                );
            if actor.epoch == self.epochs[slot] {
                self.publish(slot, phase);
            }
            if failed_now {
                self.inbox.push_back(Input::Failed(slot));
            }
            if stop {
                let actor = self.actors.get_mut(&id).unwrap();
                actor.stopped = true;
                actor.mailbox.clear();
                let core = actor.core.take();
                self.inbox.push_back(Input::Stopped(id, core));
            }
        }

        fn running(&self) -> Vec<u64> {
            (self.actors.iter())
                .filter(|(_, a)| !a.stopped)
                .map(|(id, _)| *id)
                .collect()
        }

        fn apply(&mut self, op: Op) {
            let len = self.router.len();
            match op {
                Op::Appear if self.router.is_reading() => {
                    let slot = len;
                    self.finished.push(false);
                    self.published.push(Phase::Open);
                    self.epochs.push(0);
                    self.settles.push(0);
                    self.end_sent.push(0);
                    self.cancel_sent.push(0);
                    self.router.add(Box::new(ChoiceCore::new(slot as u32, 0)));
                    self.router.batch(slot, Batch::default()).unwrap();
                    self.router.cancel_new(slot);
                    self.after_input();
                }
                Op::Batch(s) if self.router.is_reading() && len > 0 => {
                    self.router.batch(s % len, Batch::default()).unwrap();
                    self.after_input();
                }
                Op::Finish(s) if self.router.is_reading() && len > 0 => {
                    self.finished[s % len] = true;
                }
                Op::Cancel(s, r) if len > 0 => {
                    let reason = [
                        CancelReason::Asked,
                        CancelReason::LowConfidence,
                        CancelReason::Closing,
                    ][r as usize % 3];
                    self.inbox.push_back(Input::Cancel(s % len, reason));
                }
                Op::Close(mask) => {
                    let keep: Vec<u32> = (0..8).filter(|i| mask & (1 << i) != 0).collect();
                    self.inbox.push_back(Input::Close(keep.into()));
                }
                Op::Deliver(a, bad) => {
                    let running = self.running();
                    if !running.is_empty() {
                        self.deliver(running[a % running.len()], bad);
                    }
                }
                Op::Inbox => {
                    if let Some(input) = self.inbox.pop_front() {
                        self.handle_input(input);
                    }
                }
                Op::Quiet if self.router.is_reading() && self.router.any_live() => {
                    self.router.quiet();
                    self.after_input();
                    self.router.release_buffers();
                }
                Op::Panic(a) | Op::Kill(a) => {
                    let running = self.running();
                    if running.is_empty() {
                        return;
                    }
                    let id = running[a % running.len()];
                    let actor = self.actors.get_mut(&id).unwrap();
                    actor.stopped = true;
                    actor.mailbox.clear();
                    self.inbox.push_back(match op {
                        Op::Panic(_) => Input::Panicked(id),
                        _ => Input::Stopped(id, None),
                    });
                }
                Op::SpawnFails(fails) => self.spawn_fails = fails,
                Op::End(ok) if self.router.is_reading() => {
                    let outcome = if ok { Ok(()) } else { Err(error()) };
                    let finished = self.finished.clone();
                    self.router.end(outcome, |s| finished[s]).unwrap();
                    self.after_input();
                }
                _ => {}
            }
        }

        /// Ends the stream if it is not over, and runs every actor and the reader's mailbox
        /// until nothing is left to do.
        fn finish(&mut self) {
            self.spawn_fails = false;
            if self.router.is_reading() {
                self.apply(Op::End(false));
            }
            loop {
                let busy: Vec<u64> = (self.actors.iter())
                    .filter(|(_, a)| !a.stopped && !a.mailbox.is_empty())
                    .map(|(id, _)| *id)
                    .collect();
                for id in &busy {
                    self.deliver(*id, false);
                }
                let input = self.inbox.pop_front();
                let had_input = input.is_some();
                if let Some(input) = input {
                    self.handle_input(input);
                }
                if busy.is_empty() && !had_input {
                    break;
                }
            }
        }
    }

    fn check(expected: Option<u32>, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let mut model = Model::new(expected);
        for op in ops {
            model.apply(op);
        }
        model.finish();
        prop_assert!(model.violations.is_empty(), "{:?}", model.violations);
        prop_assert!(model.router.done(), "the reader's work is done");
        prop_assert_eq!(model.stops, 1, "stopped once");
        prop_assert!(model.reserves <= 1, "replacements reserved once at most");
        prop_assert!(model.drops <= 1, "the upstream dropped once at most");
        for (slot, settles) in model.settles.iter().enumerate() {
            prop_assert_eq!(*settles, 1, "slot {} settled once", slot);
        }
        let running = model.running();
        prop_assert!(running.is_empty(), "no actor left running: {:?}", running);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn every_interleaving_keeps_the_invariants(
            expected in prop::option::of(0..6u32),
            ops in prop::collection::vec(op(), 0..80),
        ) {
            check(expected, ops)?;
        }
    }

    fn fake(id: u64) -> Fake {
        Fake {
            id,
            applied: Rc::new(Cell::new(0)),
        }
    }

    fn core(index: u32) -> Box<ChoiceCore> {
        Box::new(ChoiceCore::new(index, 0))
    }

    fn commands(router: &mut Router<Fake>) -> Vec<String> {
        std::iter::from_fn(|| router.next_command())
            .map(|c| match c {
                Command::Spawn { slot, .. } => format!("spawn {slot}"),
                Command::Send { slot, msg } => match msg {
                    ChoiceMsg::Batch(_) => format!("batch {slot}"),
                    ChoiceMsg::Cancel => format!("cancel {slot}"),
                    ChoiceMsg::End(_) => format!("end {slot}"),
                    ChoiceMsg::Retire => format!("retire-msg {slot}"),
                },
                Command::Retire { slot } => format!("retire {slot}"),
                Command::PublishOrphan { slot, .. } => format!("orphan {slot}"),
                Command::Reserve(n) => format!("reserve {n}"),
                Command::DropUpstream => "drop".into(),
                Command::Stop => "stop".into(),
            })
            .collect()
    }

    #[test]
    fn a_retired_choice_waits_in_its_slot_and_restarts_with_the_next_message() {
        let mut router = Router::new(None, None);
        router.add(core(0));
        router.started(0, fake(7)).unwrap();
        router.batch(0, Batch::default()).unwrap();
        assert_eq!(commands(&mut router), ["spawn 0", "batch 0"]);
        assert!(router.busy(0), "one batch sent, none applied");
        router.quiet();
        assert_eq!(commands(&mut router), ["retire 0"]);
        router.batch(0, Batch::default()).unwrap();
        assert!(
            commands(&mut router).is_empty(),
            "nothing goes to a retiring actor"
        );
        router
            .child_stopped(7, Some(core(0)), |_| unreachable!())
            .unwrap();
        assert_eq!(commands(&mut router), ["spawn 0"]);
        router.started(0, fake(8)).unwrap();
        assert_eq!(
            commands(&mut router),
            ["batch 0"],
            "the held batch, to the new actor"
        );
    }

    #[test]
    fn a_cancel_keeps_its_reason_and_a_second_is_refused() {
        let mut router = Router::new(Some(1), None);
        router.add(core(0));
        router.started(0, fake(1)).unwrap();
        router.cancel(0, CancelReason::LowConfidence).unwrap();
        assert_eq!(
            router.slot(0).unwrap().life,
            Life::Closed(Cause::Cancelled(CancelReason::LowConfidence))
        );
        assert_eq!(
            router.cancel(0, CancelReason::Asked),
            Err(Refused::AlreadyClosed(0))
        );
        assert_eq!(router.failed(0), Err(Refused::AlreadyClosed(0)));
        assert!(router.drop_if_unwanted(|_| false));
        assert_eq!(commands(&mut router), ["spawn 0", "cancel 0", "drop"]);
    }

    #[test]
    fn a_failed_upstream_reserves_replacements_for_its_open_choices_first() {
        let mut router = Router::new(Some(3), None);
        for i in 0..2 {
            router.add(core(i));
            router.started(i as usize, fake(i as u64)).unwrap();
        }
        router.failed(1).unwrap();
        router.end(Err(error()), |_| false).unwrap();
        // Choice 0 open, choice 1 failed, choice 2 never appeared.
        assert_eq!(
            commands(&mut router),
            ["spawn 0", "spawn 1", "reserve 2", "end 0", "end 1"]
        );
        assert_eq!(router.batch(0, Batch::default()), Err(Refused::Ended(0)));
        assert_eq!(router.end(Ok(()), |_| false), Err(Refused::Draining));
    }

    #[test]
    fn a_panicked_actor_leaves_an_orphan_that_settles_at_the_end() {
        let mut router = Router::new(None, None);
        router.add(core(0));
        router.started(0, fake(1)).unwrap();
        router
            .child_failed(1, "panicked".into(), |_| {
                Box::new(ChoiceCore::orphan(0, Phase::Open))
            })
            .unwrap();
        router.batch(0, Batch::default()).unwrap();
        assert_eq!(router.slot(0).unwrap().life, Life::Closed(Cause::Failed));
        assert!(!router.done());
        router.end(Ok(()), |_| false).unwrap();
        router.stop_if_done();
        assert_eq!(
            commands(&mut router),
            ["spawn 0", "orphan 0", "orphan 0", "stop"]
        );
        assert!(router.orphan(0).unwrap().phase().is_settled());
        assert_eq!(
            router.child_failed(1, "again".into(), |_| unreachable!()),
            Err(Refused::UnknownChild)
        );
    }
}
