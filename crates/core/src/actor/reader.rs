//! The reader actor: pulls the upstream one read at a time, routes every chunk to its choice's
//! actor (spawning it when the index first appears), and ends every choice when the stream ends.

use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, ActorRuntime, SupervisionEvent};

use super::choice::{ChoiceActor, ChoiceArgs, ChoiceMsg, panic_message};
use crate::error::Error;
use crate::feed::{Feed, Step};
use crate::route::Router;
use crate::shared::{ChoiceShared, CompletionShared, LiveActor};

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
}

pub(crate) struct ReaderState<F> {
    feed: F,
    router: Router,
    shared: Arc<CompletionShared>,
    /// The actor of each router slot; `None` once it can no longer receive.
    actors: Vec<Option<ActorRef<ChoiceMsg>>>,
    /// Choice actors not yet terminated. The reader outlives them: ractor kills the children
    /// of a stopping actor, which would cut their queued updates short.
    live_children: usize,
    ended: bool,
    _live: LiveActor,
}

impl<F> Drop for ReaderState<F> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // The reader was killed (every handle dropped) or failed: stop or end every choice.
        if self.shared.is_cancelled() {
            for actor in self.actors.iter().flatten() {
                actor.kill();
            }
            return;
        }
        let error = Error::ActorFailed {
            choice: None,
            message: "the reader stopped before the stream ended".to_string(),
        };
        for actor in self.actors.iter().flatten() {
            let _ = actor.send_message(ChoiceMsg::End(Err(error.clone())));
        }
        let mut state = self.shared.lock();
        state.meta = self.router.meta.clone();
        state.end.get_or_insert(Err(error));
        state.waiters.wake_all();
    }
}

impl<F: Feed> ReaderState<F> {
    /// Spawns the actors of new choices, sends every pending batch, and publishes the new
    /// choices and warnings.
    fn flush(&mut self, myself: &ActorRef<ReaderMsg>) {
        let known = self.actors.len();
        let mut new_choices = Vec::new();
        for slot in &self.router.slots[known..] {
            let choice = Arc::new(ChoiceShared::new(
                slot.index,
                self.shared.config.max_tool_calls,
            ));
            let args = ChoiceArgs {
                shared: choice.clone(),
                completion: self.shared.clone(),
            };
            // Spawned without awaiting its start: the reader's handler (boxed once per reader
            // by ractor) stays small, and the child links to the reader before it handles any
            // message (it refuses to start if the reader is already going away).
            let spawned =
                ActorRuntime::spawn_linked_instant(None, ChoiceActor, args, myself.get_cell());
            let actor = match spawned {
                Ok((actor, _)) => {
                    self.live_children += 1;
                    Some(actor)
                }
                Err(e) => {
                    let mut state = choice.lock();
                    state.close(Err(Error::ActorFailed {
                        choice: Some(slot.index),
                        message: format!("could not start: {e}"),
                    }));
                    state.settled = true;
                    None
                }
            };
            self.actors.push(actor);
            new_choices.push(choice);
        }
        for (slot, actor) in self.router.slots.iter_mut().zip(&mut self.actors) {
            if slot.batch.is_empty() {
                continue;
            }
            let batch = std::mem::take(&mut slot.batch);
            if let Some(a) = actor {
                if a.send_message(ChoiceMsg::Updates(batch)).is_err() {
                    *actor = None;
                }
            }
        }
        if !new_choices.is_empty() || !self.router.warnings.is_empty() {
            let mut state = self.shared.lock();
            if !new_choices.is_empty() && state.meta.model.is_none() {
                // The model is known early to choice handles that count tokens.
                state.meta.model = self.router.meta.model.clone();
            }
            state.choices.extend(new_choices);
            state.warnings.append(&mut self.router.warnings);
            state.waiters.wake_all();
        }
    }

    fn end(&mut self, outcome: Result<(), Error>) {
        for actor in self.actors.iter().flatten() {
            let _ = actor.send_message(ChoiceMsg::End(outcome.clone()));
        }
        let mut state = self.shared.lock();
        state.meta = std::mem::take(&mut self.router.meta);
        state.end = Some(outcome);
        state.waiters.wake_all();
        self.ended = true;
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
        let router = Router::new(args.shared.config.max_choices);
        Ok(ReaderState {
            feed: args.feed,
            router,
            shared: args.shared,
            actors: Vec::new(),
            live_children: 0,
            ended: false,
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
        match message {
            ReaderMsg::Pull => {
                // A panic while reading or routing (or in the upstream stream itself) ends the
                // stream with a typed error after what was routed before it is delivered.
                let pull = AssertUnwindSafe(state.feed.pull(&mut state.router));
                let step = match pull.catch_unwind().await {
                    Ok(step) => step,
                    Err(panic) => Step::End(Err(Error::ActorFailed {
                        choice: None,
                        message: panic_message(&panic),
                    })),
                };
                state.flush(&myself);
                match step {
                    Step::Continue => myself.send_message(ReaderMsg::Pull)?,
                    Step::End(outcome) => {
                        state.end(outcome);
                        if state.live_children == 0 {
                            myself.stop(None);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Choice actors stop on their own after `End`; a failed one has already closed its
    /// streams with the error. The reader goes on either way (the default would stop it with
    /// its child), and stops itself once the stream is over and every child has terminated.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<ReaderMsg>,
        event: SupervisionEvent,
        state: &mut ReaderState<F>,
    ) -> Result<(), ActorProcessingErr> {
        let cell = match event {
            SupervisionEvent::ActorTerminated(cell, ..)
            | SupervisionEvent::ActorFailed(cell, _) => cell,
            _ => return Ok(()),
        };
        state.live_children = state.live_children.saturating_sub(1);
        for actor in &mut state.actors {
            if actor.as_ref().is_some_and(|a| a.get_id() == cell.get_id()) {
                *actor = None;
            }
        }
        if state.ended && state.live_children == 0 {
            myself.stop(None);
        }
        Ok(())
    }
}
