//! The reader's decisions, as a synchronous state machine with no runtime: which choice
//! holds its state where, which choices are still wanted, when the upstream is no longer
//! worth reading, what a choice's actor is sent and when, what becomes of a choice whose
//! actor died. A runtime (the reader actor of `choicewise-core`) feeds it inputs (a choice
//! appeared, its updates, a cancel with its reason, a choice failed, the upstream's end, a
//! child stopped or panicked, a quiet period) and executes the [`Command`]s it queues (spawn,
//! send, retire, publish an orphan, reserve replacements, drop the upstream, stop). Its tests
//! drive it through random interleavings with a model of the actors, without a runtime.
//!
//! One choice as the router sees it is a slot, in one of three states: an actor holds the
//! choice's state or will (who holds it, and whether its updates are wanted); the reader
//! holds what is left of a choice whose actor died or never started (failed: its updates
//! are not wanted); or nobody does (its actor settled it after the stream's end). A dead
//! choice is never wanted, an ended one never routed to: the states say so, no flag does.
//!
//! ```text
//! Held (while an actor holds the choice or will):
//!  add ─▶ Starting ──started──▶ Live ──quiet──▶ Retiring{pending} ──stopped, state back──▶ Retired
//!           ▲   │                │ │                 │                                        │
//!           │   │ start failed   │ └─stopped settled (after its end)──▶ Gone                  │
//!           │   ▼                ▼                   ▼                                        │
//!           │  Orphaned(core) ◀──── panicked, or stopped unsettled                            │
//!           │  (failed; the reader settles it at the end)                                     │
//!           └──────────────── a message comes, or messages waited ────────────────────────────┘
//!
//! Life (beside Held):  Open ──cancel(reason) or its own failure──▶ Closed
//!                      Open | Closed ──the upstream's end sent──▶ Ended   (nothing is routed after it)
//! ```

use std::collections::VecDeque;

use crate::error::{Error, ErrorDetail};
use crate::event::Warning;
use crate::lifecycle::{CancelReason, ChoiceCore, Close, Phase};
use crate::split::Batch;

#[cfg(test)]
mod tests;

/// What a choice's actor is told, in order.
#[derive(Debug)]
pub enum ChoiceMsg {
    /// The choice's updates of one read, in arrival order.
    Batch(Batch),
    /// Cancel the choice, for this reason (after the batches sent before this): its
    /// [`ChoiceCore::cancel`].
    Cancel(CancelReason),
    /// The stream is over (after the batches sent before this): settle and stop.
    End(Result<(), Error>),
    /// The upstream went quiet: stop, handing the choice's state back to the reader.
    Retire,
}

/// What the router needs of a running choice actor (the runtime's actor handle).
pub trait Child {
    /// How a supervision event names the actor.
    type Id: Copy + PartialEq;
    /// The actor's id.
    fn id(&self) -> Self::Id;
    /// How many batches the actor has applied (it counts them itself).
    fn applied(&self) -> u64;
}

/// A transition that is not allowed. Some come from races the design allows (a cancel or
/// a failure of a choice already closed or ended, a close or a cancel after the stream's
/// end); the others are a runtime's mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No such slot.
    NoSlot(usize),
    /// No slot's actor has this id (a stale supervision event).
    UnknownChild,
    /// The choice was already closed: a second cancel or failure changes nothing.
    AlreadyClosed(usize),
    /// The choice was sent the upstream's end: nothing more goes to it.
    Ended(usize),
    /// The slot is not in the state the input assumes (`started` for a slot not starting).
    NotStarting(usize),
    /// The stream is over: the upstream's end was handled already.
    Draining,
}

/// Where a choice is in its life as far as routing goes, while an actor holds it or will.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Life {
    /// Its updates are wanted.
    Open,
    /// Cancelled, or failed on its own: its updates are no longer wanted; its actor still
    /// gets the upstream's end.
    Closed,
    /// It was sent the upstream's end: nothing more is routed to it.
    Ended,
}

/// Who holds a choice's state, while an actor holds it or will.
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
}

/// One choice's state as the router sees it: the valid combinations, and nothing else.
#[derive(Debug)]
pub(crate) enum SlotState<A> {
    /// An actor holds the choice's state, or will.
    Actor { held: Held<A>, life: Life },
    /// Its actor died or never started: the reader holds what is left of it, failed (its
    /// updates are not wanted); it has ended once it settled.
    Orphaned(Box<ChoiceCore>),
    /// Its actor settled it after the upstream's end and stopped.
    Gone,
}

/// One choice as the router sees it.
#[derive(Debug)]
pub(crate) struct Slot<A> {
    /// The choice's index in the completion.
    pub index: u32,
    pub state: SlotState<A>,
}

impl<A> Slot<A> {
    /// Whether its updates are still wanted.
    pub fn wanted(&self) -> bool {
        matches!(
            self.state,
            SlotState::Actor {
                life: Life::Open,
                ..
            }
        )
    }

    /// Whether it was sent the upstream's end.
    pub fn ended(&self) -> bool {
        match &self.state {
            SlotState::Actor { life, .. } => *life == Life::Ended,
            SlotState::Orphaned(core) => core.phase().is_settled(),
            SlotState::Gone => true,
        }
    }

    /// `Open → Closed`: a cancel or the choice's own failure.
    fn close(&mut self, slot: usize) -> Result<(), Refused> {
        if self.ended() {
            return Err(Refused::Ended(slot));
        }
        match &mut self.state {
            SlotState::Actor { life, .. } if *life == Life::Open => {
                *life = Life::Closed;
                Ok(())
            }
            _ => Err(Refused::AlreadyClosed(slot)),
        }
    }

    /// The held state, while an actor holds the choice or will.
    fn held(&self) -> Option<&Held<A>> {
        match &self.state {
            SlotState::Actor { held, .. } => Some(held),
            _ => None,
        }
    }
}

/// What the reader is to do, in order.
#[derive(Debug)]
pub enum Command {
    /// Start an actor for the slot with this state; report [`Router::started`] or
    /// [`Router::start_failed`].
    Spawn {
        /// The choice's slot.
        slot: usize,
        /// The choice's state, for the new actor.
        core: Box<ChoiceCore>,
    },
    /// Send the slot's actor ([`Router::live`]) this message; report
    /// [`Router::undelivered`] if it could not be sent.
    Send {
        /// The choice's slot.
        slot: usize,
        /// The message.
        msg: ChoiceMsg,
    },
    /// Ask the slot's actor ([`Router::actor`]) to retire ([`ChoiceMsg::Retire`]).
    Retire {
        /// The choice's slot.
        slot: usize,
    },
    /// Publish the phase of a choice whose actor is gone (the reader taking its log over),
    /// after the warning, if any.
    PublishOrphan {
        /// The choice's slot.
        slot: usize,
        /// Its phase now.
        phase: Phase,
        /// A warning its settling raised.
        warning: Option<Warning>,
    },
    /// Reserve replacements for this many failed choices (before they learn of the failure).
    Reserve(usize),
    /// No choice is wanted: drop the upstream (closing its connection) and end the stream
    /// ([`Router::end`]).
    DropUpstream,
    /// The stream is over and every choice settled: stop. Always the last command.
    Stop,
}

/// Where the reader is in its life.
///
/// ```text
/// Reading { closing: None } ──close(keep, reason)──▶ Reading { closing: Some(close) }
///        └──────── the stream ends, or no choice is wanted ────────▶ Draining ──last child ended──▶ Stop
/// ```
#[derive(Debug)]
enum ReaderPhase {
    /// Reading the upstream; `closing`: every choice, and every choice still to appear, is
    /// unwanted but those kept (indexes of the completion), cancelled for its reason.
    Reading { closing: Option<Close> },
    /// The stream is over and every choice was told how (after its updates).
    Draining(Result<(), Error>),
}

/// The reader's decisions for one upstream (see the module's doc): fed its inputs, it
/// queues the [`Command`]s its runtime executes, in order, with [`next_command`]; after each
/// input the runtime calls [`after_input`] and executes what it queued. [`Command::Stop`]
/// comes last, once the stream is over and every choice has settled.
///
/// [`next_command`]: Router::next_command
/// [`after_input`]: Router::after_input
///
/// ```
/// use choicewise_proto::driver::{Batch, ChoiceCore, ChoiceMsg, Child, Command, Router};
///
/// struct Actor(u32);
/// impl Child for Actor {
///     type Id = u32;
///     fn id(&self) -> u32 { self.0 }
///     fn applied(&self) -> u64 { 0 }
/// }
///
/// let mut router = Router::new(Some(1), None);
/// let slot = router.add(Box::new(ChoiceCore::new(0, 8)));
/// router.batch(slot, Batch::default()).unwrap();
/// assert!(matches!(router.next_command(), Some(Command::Spawn { slot: 0, .. })));
/// router.started(slot, Actor(7)).unwrap(); // the batch that waited goes to the actor
/// let Some(Command::Send { msg: ChoiceMsg::Batch(_), .. }) = router.next_command() else { panic!() };
/// router.end(Ok(()), |_| false).unwrap();
/// let Some(Command::Send { msg: ChoiceMsg::End(Ok(())), .. }) = router.next_command() else { panic!() };
/// // The actor settled its choice and stopped, handing it back.
/// let mut settled = ChoiceCore::new(0, 8);
/// settled.settle(Ok(()), &mut Vec::new());
/// router.child_stopped(7, Some(Box::new(settled)), |_| unreachable!()).unwrap();
/// assert!(matches!(router.next_command(), Some(Command::Stop)));
/// assert!(router.next_command().is_none());
/// ```
#[derive(Debug)]
pub struct Router<A> {
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
    /// [`Command::Stop`] was given.
    stopped: bool,
    out: VecDeque<Command>,
}

impl<A: Child> Router<A> {
    /// A router for an upstream of `expected` choices (when known), of a completion that is
    /// `closing` already (keeping its indexes, cancelling the others for its reason).
    pub fn new(expected: Option<u32>, closing: Option<Close>) -> Self {
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

    /// The next command to execute; [`Command::Stop`] once, when nothing else is left and
    /// the work is done.
    pub fn next_command(&mut self) -> Option<Command> {
        if let Some(command) = self.out.pop_front() {
            return Some(command);
        }
        if !self.stopped && self.done() {
            self.stopped = true;
            return Some(Command::Stop);
        }
        None
    }

    /// Frees the command queue's buffer once it is empty (the upstream went quiet: an idle
    /// reader holds no more than it must).
    pub fn release_buffers(&mut self) {
        if self.out.is_empty() {
            self.out = VecDeque::new();
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    #[cfg(test)]
    pub(crate) fn slot(&self, slot: usize) -> Option<&Slot<A>> {
        self.slots.get(slot)
    }

    /// The slot's actor, while it runs (live or retiring).
    pub fn actor(&self, slot: usize) -> Option<&A> {
        match self.slots.get(slot)?.held()? {
            Held::Live { actor, .. } | Held::Retiring { actor, .. } => Some(actor),
            _ => None,
        }
    }

    /// The slot's actor, while it is live (not retiring).
    pub fn live(&self, slot: usize) -> Option<&A> {
        match self.slots.get(slot)?.held()? {
            Held::Live { actor, .. } => Some(actor),
            _ => None,
        }
    }

    /// The orphan the reader holds for the slot.
    #[cfg(test)]
    pub(crate) fn orphan(&self, slot: usize) -> Option<&ChoiceCore> {
        match &self.slots.get(slot)?.state {
            SlotState::Orphaned(core) => Some(core),
            _ => None,
        }
    }

    /// The completion is closing: the indexes kept and why the others are cancelled, while
    /// reading.
    pub fn closing(&self) -> Option<&Close> {
        match &self.phase {
            ReaderPhase::Reading { closing } => closing.as_ref(),
            ReaderPhase::Draining(_) => None,
        }
    }

    /// Whether the upstream is still read (its end not handled yet).
    pub fn is_reading(&self) -> bool {
        matches!(self.phase, ReaderPhase::Reading { .. })
    }

    /// How many choices the upstream will have, when known.
    pub fn expected(&self) -> Option<u32> {
        self.expected
    }

    /// Whether a choice actor runs (not retiring): the quiet timer is armed only then.
    pub fn any_live(&self) -> bool {
        (self.slots.iter()).any(|s| matches!(s.held(), Some(Held::Live { .. })))
    }

    /// Whether the slot's updates should wait: its actor has batches still to apply, or it
    /// is retiring.
    pub fn busy(&self, slot: usize) -> bool {
        match self.slots.get(slot).and_then(Slot::held) {
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
            state: SlotState::Actor {
                held: Held::Starting {
                    pending: Vec::new(),
                },
                life: Life::Open,
            },
        });
        self.out.push_back(Command::Spawn { slot, core });
        slot
    }

    /// The slot's actor started: the messages that waited for it go to it.
    pub fn started(&mut self, slot: usize, actor: A) -> Result<(), Refused> {
        let s = self.slots.get_mut(slot).ok_or(Refused::NoSlot(slot))?;
        let SlotState::Actor {
            held: held @ Held::Starting { .. },
            ..
        } = &mut s.state
        else {
            return Err(Refused::NotStarting(slot));
        };
        let Held::Starting { pending } = std::mem::replace(held, Held::Live { actor, sent: 0 })
        else {
            unreachable!("matched above")
        };
        for msg in pending {
            self.route(slot, msg);
        }
        Ok(())
    }

    /// The slot's actor could not start (`message` says why): the reader holds `orphan`
    /// (what its log published), failed, no longer wanted; the messages that waited for
    /// the actor go to it.
    pub fn start_failed(
        &mut self,
        slot: usize,
        orphan: Box<ChoiceCore>,
        message: String,
    ) -> Result<(), Refused> {
        let s = self.slots.get(slot).ok_or(Refused::NoSlot(slot))?;
        if !matches!(s.held(), Some(Held::Starting { .. })) {
            return Err(Refused::NotStarting(slot));
        }
        self.orphan_slot(slot, orphan, message);
        Ok(())
    }

    /// The choice's updates of one read.
    pub fn batch(&mut self, slot: usize, batch: Batch) -> Result<(), Refused> {
        if self.slots.get(slot).ok_or(Refused::NoSlot(slot))?.ended() {
            return Err(Refused::Ended(slot));
        }
        self.route(slot, ChoiceMsg::Batch(batch));
        Ok(())
    }

    /// A cancel of the choice, for `reason`: sent to it after the updates sent before.
    pub fn cancel(&mut self, slot: usize, reason: CancelReason) -> Result<(), Refused> {
        if !self.is_reading() {
            return Err(Refused::Draining);
        }
        let s = self.slots.get_mut(slot).ok_or(Refused::NoSlot(slot))?;
        s.close(slot)?;
        // Only a cancel taken counts: a refused one (a choice already closed or ended) lets
        // no upstream be dropped.
        self.cancelled_any = true;
        self.route(slot, ChoiceMsg::Cancel(reason));
        Ok(())
    }

    /// A choice failed at its bound of bytes (`max_choice_bytes`): an upstream that would
    /// send it without end. Once no other choice is wanted the upstream is dropped, as after
    /// a cancel, rather than read to its end for its usage.
    ///
    /// ```
    /// # use choicewise_proto::driver::Router;
    /// # fn mark<A: choicewise_proto::driver::Child>(router: &mut Router<A>) {
    /// router.failed_at_bound();
    /// # }
    /// ```
    pub fn failed_at_bound(&mut self) {
        self.bounded_any = true;
    }

    /// The choice failed on its own (its actor says so): its updates are no longer wanted.
    pub fn failed(&mut self, slot: usize) -> Result<(), Refused> {
        let s = self.slots.get_mut(slot).ok_or(Refused::NoSlot(slot))?;
        s.close(slot)
    }

    /// The completion is closing: every choice, and every choice still to appear, is
    /// unwanted but those `close` keeps (indexes of the completion); those still wanted and
    /// not finished (`finished`) are cancelled now, for its reason.
    pub fn close(&mut self, close: Close, finished: impl Fn(usize) -> bool) -> Result<(), Refused> {
        let ReaderPhase::Reading { closing } = &mut self.phase else {
            return Err(Refused::Draining);
        };
        *closing = Some(close);
        self.cancel_unkept(0, finished);
        Ok(())
    }

    /// While the completion is closing, the choices from slot `from` on (new with the last
    /// read, after their first updates) are cancelled but those kept.
    pub fn cancel_new(&mut self, from: usize) {
        self.cancel_unkept(from, |_| false);
    }

    /// While closing, cancels the choices from slot `from` on that are still wanted, not
    /// finished and not kept.
    fn cancel_unkept(&mut self, from: usize, finished: impl Fn(usize) -> bool) {
        let Some(close) = self.closing().cloned() else {
            return;
        };
        for slot in from..self.slots.len() {
            let s = &self.slots[slot];
            if s.wanted() && !finished(slot) && !close.keeps(s.index) {
                self.cancel(slot, close.reason)
                    .expect("a wanted choice is open, while reading");
            }
        }
    }

    /// The upstream went quiet: every live actor retires.
    pub fn quiet(&mut self) {
        for (slot, s) in self.slots.iter_mut().enumerate() {
            let SlotState::Actor { held, .. } = &mut s.state else {
                continue;
            };
            if let Held::Live { .. } = held {
                let retiring = Held::Retiring {
                    actor: match std::mem::replace(held, Held::Starting { pending: vec![] }) {
                        Held::Live { actor, .. } => actor,
                        _ => unreachable!("matched above"),
                    },
                    pending: Vec::new(),
                };
                *held = retiring;
                self.out.push_back(Command::Retire { slot });
            }
        }
    }

    /// A message could not be sent to the slot's actor (it died: its supervision event is
    /// on its way and will fail the choice): a batch it was counted for is not.
    pub fn undelivered(&mut self, slot: usize, batch: bool) {
        if let Some(Slot {
            state:
                SlotState::Actor {
                    held: Held::Live { sent, .. },
                    ..
                },
            ..
        }) = self.slots.get_mut(slot)
            && batch
        {
            *sent -= 1;
        }
    }

    /// Routes a message to the slot's holder: sent to a live actor, held for a starting or
    /// retiring one, an actor started for a retired choice, applied here to an orphan.
    fn route(&mut self, slot: usize, msg: ChoiceMsg) {
        match &mut self.slots[slot].state {
            SlotState::Actor { held, .. } => match held {
                Held::Live { sent, .. } => {
                    if matches!(msg, ChoiceMsg::Batch(_)) {
                        *sent += 1;
                    }
                    self.out.push_back(Command::Send { slot, msg });
                }
                Held::Retiring { pending, .. } | Held::Starting { pending } => pending.push(msg),
                Held::Retired(_) => {
                    let starting = Held::Starting { pending: vec![msg] };
                    let Held::Retired(core) = std::mem::replace(held, starting) else {
                        unreachable!("matched above")
                    };
                    self.out.push_back(Command::Spawn { slot, core });
                }
            },
            SlotState::Orphaned(orphan) => match msg {
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
                ChoiceMsg::Cancel(_) | ChoiceMsg::Retire => {}
            },
            SlotState::Gone => {}
        }
    }

    /// The slot whose actor has this id.
    fn slot_of(&self, id: A::Id) -> Option<usize> {
        self.slots.iter().position(|s| match s.held() {
            Some(Held::Live { actor, .. } | Held::Retiring { actor, .. }) => actor.id() == id,
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
        let s = &mut self.slots[slot];
        let SlotState::Actor { held, life } = &mut s.state else {
            unreachable!("slot_of finds actors only")
        };
        match core {
            Some(core) if matches!(held, Held::Retiring { .. }) => {
                let Held::Retiring { pending, .. } = std::mem::replace(held, Held::Retired(core))
                else {
                    unreachable!("matched above")
                };
                if !pending.is_empty() {
                    // What waited goes to a new actor, in order.
                    let Held::Retired(core) = std::mem::replace(held, Held::Starting { pending })
                    else {
                        unreachable!("set above")
                    };
                    self.out.push_back(Command::Spawn { slot, core });
                }
            }
            // After its end: only the end settles a choice.
            Some(core) if core.phase().is_settled() => {
                debug_assert_eq!(*life, Life::Ended, "settled before its end was sent");
                s.state = SlotState::Gone;
            }
            // Killed, or stopped with its choice unsettled: nothing else stops one.
            _ => self.fail_child(
                slot,
                "the choice's actor stopped before the stream ended".to_string(),
                orphan,
            ),
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
        let orphan = orphan(slot);
        self.orphan_slot(slot, orphan, message);
        if let ReaderPhase::Draining(outcome) = &self.phase {
            // Its end was lost with it (settled already if it waited among its messages).
            let outcome = outcome.clone();
            self.route(slot, ChoiceMsg::End(outcome));
        }
    }

    /// The reader takes the choice over, failed with `message`: it publishes the failure,
    /// and what waited for the choice's actor is applied to the orphan.
    fn orphan_slot(&mut self, slot: usize, mut orphan: Box<ChoiceCore>, message: String) {
        orphan.fail(Error::from(ErrorDetail::ActorFailed {
            choice: Some(orphan.index()),
            message,
        }));
        self.out.push_back(Command::PublishOrphan {
            slot,
            phase: orphan.phase().clone(),
            warning: None,
        });
        let pending =
            match std::mem::replace(&mut self.slots[slot].state, SlotState::Orphaned(orphan)) {
                SlotState::Actor {
                    held: Held::Starting { pending } | Held::Retiring { pending, .. },
                    ..
                } => pending,
                _ => Vec::new(),
            };
        for msg in pending {
            self.route(slot, msg);
        }
    }

    /// How many of this upstream's choices its failure fails: those still wanted and not
    /// finished (`finished`: the stream finished the slot's choice), and the declared ones
    /// that never appeared.
    pub fn failing(&self, finished: impl Fn(usize) -> bool) -> usize {
        let open = (self.slots.iter().enumerate())
            .filter(|(i, s)| s.wanted() && !finished(*i))
            .count();
        let missing = self
            .expected
            .map_or(0, |n| (n as usize).saturating_sub(self.slots.len()));
        open + missing
    }

    /// Whether no choice of this upstream is wanted any more: the completion is closing, or
    /// at least one choice was cancelled and every expected choice has appeared; and each
    /// has finished (`finished`), failed or been cancelled.
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
        (self.slots.iter().enumerate()).all(|(i, s)| finished(i) || !s.wanted())
    }

    /// What the runtime calls after each input it fed (and before it executes the commands
    /// that input queued, or after: either order): queues [`Command::DropUpstream`] when no
    /// choice is wanted (`finished`: the stream finished the slot's choice), once. Returns
    /// whether it did.
    pub fn after_input(&mut self, finished: impl Fn(usize) -> bool) -> bool {
        if self.dropped || !self.unwanted(finished) {
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
            // Each slot ends once: the phase was `Reading` until here.
            if let SlotState::Actor { life, .. } = &mut self.slots[slot].state {
                *life = Life::Ended;
            }
            self.route(slot, ChoiceMsg::End(outcome.clone()));
        }
        Ok(())
    }

    /// Whether the reader's work is done: the stream is over and every choice has settled
    /// (its actor stopped, or the reader holds it).
    pub fn done(&self) -> bool {
        matches!(self.phase, ReaderPhase::Draining(_))
            && (self.slots.iter()).all(|s| !matches!(s.state, SlotState::Actor { .. }))
    }
}
