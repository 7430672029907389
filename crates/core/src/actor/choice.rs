//! The per-choice actor: does its choice's work. It parses the choice's raw updates
//! (`decode`), merges them and appends the events to the choice's log, on whichever core it
//! runs, side by side with the reader and the other choices.
//!
//! A malformed update, a broken limit or a panic fails this choice only. The actor keeps no
//! state of the choice itself: the merged message and the log live in the choice's
//! [`ChoiceShared`], so the reader can retire the actor while the upstream is quiet and start
//! another for the next update. Each batch carries its number; an actor applies batch `k` only
//! after batch `k - 1` (see [`ChoiceState::turn_of`]), so successive actors never reorder a
//! choice's updates.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::Poll;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::decode::decode_batch;
use crate::error::{Error, ErrorDetail};
use crate::event::{ChoiceEvent, Warning};
use crate::merge::ChoiceUpdate;
use crate::shared::{ChoiceShared, CompletionShared, LiveActor, Subscription};
use crate::split::Batch;

/// Messages of a choice actor.
#[derive(Debug)]
pub(crate) enum ChoiceMsg {
    /// The updates of one read, in arrival order: batch number `seq` of the choice.
    Batch { seq: u64, batch: Batch },
    /// The stream is over (after batch number `seq - 1`); no more updates will come.
    End {
        seq: u64,
        outcome: Result<(), Error>,
    },
    /// The upstream went quiet: stop once everything queued before this is applied, leaving
    /// the choice open.
    Retire,
}

pub(crate) struct ChoiceActor;

pub(crate) struct ChoiceArgs {
    pub shared: Arc<ChoiceShared>,
    pub completion: Arc<CompletionShared>,
}

pub(crate) struct ChoiceActorState {
    exit: Exit,
    completion: Arc<CompletionShared>,
    scratch: Scratch,
    _live: LiveActor,
}

/// Fails the choice if the actor goes without being told to (a kill, a panic that the
/// catches miss), so that no reader waits forever.
struct Exit {
    shared: Arc<ChoiceShared>,
    clean: bool,
}

impl Drop for Exit {
    fn drop(&mut self) {
        if !self.clean {
            self.shared.lock().fail(stopped_early(self.shared.index));
        }
    }
}

impl ChoiceActorState {
    fn shared(&self) -> &Arc<ChoiceShared> {
        &self.exit.shared
    }

    /// Waits until batch `seq` is this choice's next (an earlier actor may still be applying
    /// the ones before it).
    async fn turn(&self, seq: u64) {
        if self.shared().lock().turn_of(seq) {
            return;
        }
        let sub = Subscription::new(self.shared().clone());
        Box::pin(sub.wait(|state| match state.turn_of(seq) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }))
        .await;
    }

    fn settle(&mut self, outcome: Result<(), Error>) {
        let index = self.shared().index;
        let mut state = self.exit.shared.lock();
        // The warning is published before the choice's lock is released, so that whoever
        // waits for the choice to settle (`collect`) finds it. (Lock order: a choice, then
        // the completion; nothing takes them the other way round.)
        if let Some(w) = state.settle(index, outcome) {
            self.completion.lock().warnings.push(w);
        }
    }
}

impl Actor for ChoiceActor {
    type Msg = ChoiceMsg;
    type State = ChoiceActorState;
    type Arguments = ChoiceArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<ChoiceMsg>,
        args: ChoiceArgs,
    ) -> Result<ChoiceActorState, ActorProcessingErr> {
        Ok(ChoiceActorState {
            exit: Exit {
                shared: args.shared,
                clean: false,
            },
            completion: args.completion,
            scratch: Scratch::default(),
            _live: LiveActor::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ChoiceMsg>,
        message: ChoiceMsg,
        state: &mut ChoiceActorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ChoiceMsg::Batch { seq, batch } => {
                state.turn(seq).await;
                // Parsing and merging are synchronous: a panic in them is caught and fails
                // this choice only; this actor stays to count its later updates.
                let ChoiceActorState {
                    exit,
                    completion,
                    scratch,
                    ..
                } = state;
                apply_batch_isolated(&exit.shared, completion, batch, scratch);
            }
            ChoiceMsg::End { seq, outcome } => {
                state.turn(seq).await;
                state.settle(outcome);
                state.exit.clean = true;
                myself.stop(None);
            }
            ChoiceMsg::Retire => {
                // Quiet: the buffers kept for the next reads are freed with the actor.
                state.shared().lock().spare.clear();
                state.exit.clean = true;
                myself.stop(None);
            }
        }
        Ok(())
    }
}

/// Buffers reused from one batch to the next: its parsed updates, the events of one update.
#[derive(Default)]
pub(crate) struct Scratch {
    updates: Vec<ChoiceUpdate>,
    events: Vec<ChoiceEvent>,
}

/// Does a choice's work on one batch: parses it (outside the lock: readers of the choice are
/// not held up), then merges it. The batch is left empty, its buffers kept.
pub(crate) fn apply_batch(
    shared: &ChoiceShared,
    completion: &CompletionShared,
    batch: &mut Batch,
    scratch: &mut Scratch,
) {
    let Scratch { updates, events } = scratch;
    // Whoever applies batches applies them for several choices (the reader) or after a
    // panic (an actor): nothing of an earlier batch may carry over.
    updates.clear();
    events.clear();
    let index = shared.index;
    if shared.lock().skip_batch(batch) {
        // The choice failed: its later updates are counted, not parsed.
        return;
    }
    let decoded = decode_batch(index, batch, updates);
    #[cfg(feature = "fault-injection")]
    injected_faults(shared, index, updates, events);
    let mut warnings: Vec<Warning> = Vec::new();
    shared.lock().apply(updates, decoded, events, &mut warnings);
    if !warnings.is_empty() {
        completion.lock().warnings.extend(warnings);
    }
}

/// Applies a batch as [`apply_batch`] does, catching a panic in the parse or the merge: it
/// fails this choice only (the choice takes no more updates; its later ones are counted).
/// The emptied batch goes back to the choice's [`BatchPool`](crate::split::BatchPool), for
/// the reader to fill again.
pub(crate) fn apply_batch_isolated(
    shared: &ChoiceShared,
    completion: &CompletionShared,
    mut batch: Batch,
    scratch: &mut Scratch,
) {
    let applied = catch_unwind(AssertUnwindSafe(|| {
        apply_batch(shared, completion, &mut batch, scratch)
    }));
    let mut state = shared.lock();
    if let Err(panic) = applied {
        state.fail(Error::from(ErrorDetail::ActorFailed {
            choice: Some(shared.index),
            message: panic_message(&panic),
        }));
    }
    // Counted once the failure, if any, is recorded: the reader, which applies a batch only
    // when every earlier one is handled, never sees this choice open between the two.
    state.batch_handled();
    if !state.settled {
        state.spare.put(batch);
    }
}

/// Test-only faults: a slow choice, and a panic after the updates before the trigger are
/// applied.
#[cfg(feature = "fault-injection")]
fn injected_faults(
    shared: &ChoiceShared,
    index: u32,
    updates: &mut Vec<ChoiceUpdate>,
    events: &mut Vec<ChoiceEvent>,
) {
    let content = |u: &ChoiceUpdate| u.content.as_deref().unwrap_or_default().to_string();
    if updates
        .iter()
        .any(|u| content(u).starts_with(crate::fault::FAULT_SLOW_CHOICE))
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let panic_at = updates
        .iter()
        .position(|u| content(u) == crate::fault::FAULT_PANIC_CHOICE);
    if let Some(at) = panic_at {
        let mut before: Vec<ChoiceUpdate> = updates.drain(..at).collect();
        let mut warnings = Vec::new();
        shared
            .lock()
            .apply(&mut before, Ok(()), events, &mut warnings);
        panic!("injected fault in choice {index}");
    }
}

/// The error of a choice whose actor stopped for good before the stream ended.
pub(crate) fn stopped_early(choice: u32) -> Error {
    Error::from(ErrorDetail::ActorFailed {
        choice: Some(choice),
        message: "the choice's actor stopped before the stream ended".to_string(),
    })
}

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}
