//! The per-choice actor: merges its choice's updates and appends the events to its log.

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
}

pub(crate) struct ChoiceActor;

pub(crate) struct ChoiceArgs {
    pub shared: Arc<ChoiceShared>,
    pub completion: Arc<CompletionShared>,
}

pub(crate) struct ChoiceActorState {
    shared: Arc<ChoiceShared>,
    completion: Arc<CompletionShared>,
    /// Reused buffer of the events one update causes.
    buf: Vec<ChoiceEvent>,
    /// The choice ended with an error of its own; later updates are ignored.
    failed: bool,
    _live: LiveActor,
}

impl Drop for ChoiceActorState {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if !state.settled {
            state.close(Err(Error::ActorFailed {
                choice: Some(self.shared.index),
                message: "the choice's actor stopped before the stream ended".to_string(),
            }));
            state.settled = true;
            state.waiters.wake_all();
        }
    }
}

impl ChoiceActorState {
    fn apply(&mut self, batch: Vec<ChoiceUpdate>) {
        if self.failed {
            return;
        }
        let mut warnings: Vec<Warning> = Vec::new();
        {
            let mut guard = self.shared.lock();
            let state = &mut *guard;
            for update in batch {
                #[cfg(feature = "fault-injection")]
                if update.content.as_deref() == Some(crate::fault::FAULT_PANIC_CHOICE) {
                    panic!("injected fault in choice {}", self.shared.index);
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
                    self.failed = true;
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
        let mut state = self.shared.lock();
        state.close(outcome);
        state.settled = true;
        state.waiters.wake_all();
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
            shared: args.shared,
            completion: args.completion,
            buf: Vec::new(),
            failed: false,
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
                        choice: Some(state.shared.index),
                        message: message.clone(),
                    }));
                    return Err(message.into());
                }
            }
            ChoiceMsg::End(outcome) => {
                state.end(outcome);
                myself.stop(None);
            }
        }
        Ok(())
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
