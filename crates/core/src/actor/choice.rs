//! The per-choice actor: merges its choice's updates and appends the events to its log.
//!
//! The actor keeps nothing of the choice itself: the merged state and the log live in the
//! choice's [`ChoiceShared`]. That is what lets the reader retire an actor when the upstream
//! goes quiet and spawn a new one for the next update.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::error::Error;
use crate::event::{ChoiceEvent, Warning};
use crate::merge::ChoiceUpdate;
use crate::shared::{ChoiceShared, CompletionShared, LiveActor};

/// Messages of a choice actor.
#[derive(Debug)]
pub(crate) enum ChoiceMsg {
    /// The updates of one read, in arrival order.
    Updates(Vec<ChoiceUpdate>),
    /// The stream is over; no more updates will come.
    End(Result<(), Error>),
    /// The upstream went quiet: stop once everything queued before this is applied, leaving
    /// the choice open (the reader sends nothing after it, and spawns a new actor for the next
    /// update).
    Retire,
}

pub(crate) struct ChoiceActor;

pub(crate) struct ChoiceArgs {
    pub attachment: Attachment,
    pub completion: Arc<CompletionShared>,
}

/// Marks a choice as having an actor, from the reader's spawn until the actor's state drops
/// (or, if the actor never starts, until its arguments drop). Dropping it detaches the actor:
/// if the choice was not settled and the actor was not retired, the choice ends with
/// [`Error::ActorFailed`] so that no reader waits forever.
pub(crate) struct Attachment(Arc<ChoiceShared>);

impl Attachment {
    pub fn new(shared: Arc<ChoiceShared>) -> Self {
        shared.lock().attached = true;
        Attachment(shared)
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.attached = false;
        if !state.settled && !state.retired {
            state.settle(Err(stopped_early(self.0.index)));
        } else {
            // The reader may be waiting for a retired actor to be gone.
            state.waiters.wake_all();
        }
    }
}

pub(crate) struct ChoiceActorState {
    attachment: Attachment,
    completion: Arc<CompletionShared>,
    /// Reused buffer of the events one update causes.
    buf: Vec<ChoiceEvent>,
    _live: LiveActor,
}

impl ChoiceActorState {
    fn shared(&self) -> &Arc<ChoiceShared> {
        &self.attachment.0
    }

    fn apply(&mut self, batch: Vec<ChoiceUpdate>) {
        #[cfg(feature = "fault-injection")]
        if batch.iter().any(|u| {
            u.content
                .as_deref()
                .is_some_and(|c| c.starts_with(crate::fault::FAULT_SLOW_CHOICE))
        }) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let mut warnings: Vec<Warning> = Vec::new();
        {
            let shared = &self.attachment.0;
            let mut guard = shared.lock();
            let state = &mut *guard;
            // A failed choice ignores what follows its error; a settled one takes no writes.
            if state.takes_no_updates() {
                return;
            }
            for update in batch {
                #[cfg(feature = "fault-injection")]
                if update.content.as_deref() == Some(crate::fault::FAULT_PANIC_CHOICE) {
                    panic!("injected fault in choice {}", shared.index);
                }
                let was_finished = state.acc.is_finished();
                let result = state.acc.apply(update, &mut self.buf);
                warnings.extend(self.buf.iter().filter_map(|e| match e {
                    ChoiceEvent::Warning(w) => Some(w.clone()),
                    _ => None,
                }));
                if was_finished {
                    // The sub-streams ended at the finish: late data goes to the message and
                    // the completion's warnings only.
                    self.buf.clear();
                } else {
                    state.events.append(&mut self.buf);
                    if state.acc.is_finished() {
                        state.close(Ok(()));
                    }
                }
                if let Err(e) = result {
                    state.fail(e);
                    break;
                }
            }
            state.waiters.wake_all();
        }
        if !warnings.is_empty() {
            self.completion.lock().warnings.extend(warnings);
        }
    }

    fn end(&mut self, outcome: Result<(), Error>) {
        self.shared().lock().settle(outcome);
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
            attachment: args.attachment,
            completion: args.completion,
            buf: Vec::new(),
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
            ChoiceMsg::Updates(batch) => {
                // Merging is synchronous: a panic in it is caught here, reported on this
                // choice's streams with its message, and fails the actor for its supervisor.
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| state.apply(batch))) {
                    let message = panic_message(&panic);
                    state.end(Err(Error::ActorFailed {
                        choice: Some(state.shared().index),
                        message: message.clone(),
                    }));
                    return Err(message.into());
                }
            }
            ChoiceMsg::End(outcome) => {
                state.end(outcome);
                myself.stop(None);
            }
            ChoiceMsg::Retire => myself.stop(None),
        }
        Ok(())
    }
}

/// The error of a choice whose actor stopped for good before the stream ended.
pub(crate) fn stopped_early(choice: u32) -> Error {
    Error::ActorFailed {
        choice: Some(choice),
        message: "the choice's actor stopped before the stream ended".to_string(),
    }
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
