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

use super::choice::{Attachment, ChoiceActor, ChoiceArgs, ChoiceMsg, panic_message, stopped_early};
use crate::error::Error;
use crate::feed::{Feed, Step};
use crate::route::Router;
use crate::shared::{ChoiceShared, CompletionShared, LiveActor, Subscription};

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
    /// One per router slot, in the same order.
    choices: Vec<ChoiceSlot>,
    /// The stream is over and every choice has been told.
    ended: bool,
    _live: LiveActor,
}

/// A choice as the reader sees it.
struct ChoiceSlot {
    shared: Arc<ChoiceShared>,
    actor: ChildActor,
}

/// The actor of a choice.
enum ChildActor {
    /// Running: updates go to it.
    Live(ActorRef<ChoiceMsg>),
    /// Retired after the upstream went quiet, applying what it had queued (while
    /// `ChoiceState::attached` holds). The next update or the end of the stream spawns a new
    /// actor or settles the choice, once the old one is gone.
    Retired,
    /// Failed or could not start: the choice is settled already, and nothing more is sent
    /// for it.
    Gone,
}

impl ChoiceSlot {
    fn is_live(&self) -> bool {
        matches!(self.actor, ChildActor::Live(_))
    }

    /// Spawns the choice's actor, without awaiting its start (its queue fills meanwhile).
    ///
    /// Not linked to the reader: ractor would kill a stopping reader's children before they
    /// apply their queues, and a child's start would sit as an event in the reader's queue,
    /// holding the child's mailbox, for as long as the reader waits on the upstream. The
    /// reader needs no events: a failed actor has settled its choice (its `Attachment`
    /// guard), and sending to it fails.
    fn spawn(&mut self, completion: &Arc<CompletionShared>) {
        {
            let mut state = self.shared.lock();
            state.retired = false;
            if state.settled {
                self.actor = ChildActor::Gone;
                return;
            }
        }
        let args = ChoiceArgs {
            attachment: Attachment::new(self.shared.clone()),
            completion: completion.clone(),
        };
        self.actor = match ActorRuntime::spawn_instant(None, ChoiceActor, args) {
            Ok((actor, _)) => ChildActor::Live(actor),
            Err(e) => {
                self.shared.lock().settle(Err(Error::ActorFailed {
                    choice: Some(self.shared.index),
                    message: format!("could not start: {e}"),
                }));
                ChildActor::Gone
            }
        };
    }

    /// Asks a live actor to apply what it has queued and stop, leaving the choice open. (Not
    /// ractor's `drain`: a draining actor that has not started yet refuses to link and never
    /// handles its queue.)
    fn retire(&mut self) {
        if let ChildActor::Live(actor) = &self.actor {
            self.shared.lock().retired = true;
            if actor.send_message(ChoiceMsg::Retire).is_err() {
                // Already stopping on its own (it failed): its guard settles the choice,
                // unless it went while marked retired.
                let mut state = self.shared.lock();
                state.retired = false;
                if !state.attached && !state.settled {
                    state.settle(Err(stopped_early(self.shared.index)));
                }
            }
            self.actor = ChildActor::Retired;
        }
    }

    /// Waits until the retired actor has applied its queue and gone, so that no two actors
    /// ever write the same choice. Callers box this future: it is rare, and its state would
    /// otherwise sit in the reader's message loop, which ractor boxes once for the reader's
    /// whole life.
    async fn retired_gone(&self) {
        if !self.shared.lock().attached {
            return;
        }
        let sub = Subscription::new(self.shared.clone());
        sub.wait(|state| match state.attached {
            true => Poll::Pending,
            false => Poll::Ready(()),
        })
        .await;
    }
}

/// Retires every live actor: the upstream has been quiet for `hibernate_after`.
fn retire_all(choices: &mut [ChoiceSlot]) {
    choices.iter_mut().for_each(ChoiceSlot::retire);
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
                if let ChildActor::Live(actor) = &choice.actor {
                    actor.kill();
                }
            }
            return;
        }
        let error = Error::ActorFailed {
            choice: None,
            message: "the reader stopped before the stream ended".to_string(),
        };
        for choice in &self.choices {
            match &choice.actor {
                ChildActor::Live(actor) => {
                    let _ = actor.send_message(ChoiceMsg::End(Err(error.clone())));
                }
                ChildActor::Retired => {
                    let mut state = choice.shared.lock();
                    if state.attached {
                        // No longer retired: its guard ends the choice when it is gone.
                        state.retired = false;
                    } else {
                        state.settle(Err(error.clone()));
                    }
                }
                ChildActor::Gone => {}
            }
        }
        let mut state = self.shared.lock();
        state.meta = self.router.meta.clone();
        state.end.get_or_insert(Err(error));
        state.waiters.wake_all();
    }
}

impl<F: Feed> ReaderState<F> {
    /// Spawns the actors of new choices, sends every pending batch (spawning a new actor for
    /// a retired one), and publishes the new choices and warnings.
    async fn flush(&mut self) {
        let known = self.choices.len();
        let mut new_choices = Vec::new();
        for slot in &self.router.slots[known..] {
            let mut choice = ChoiceSlot {
                shared: Arc::new(ChoiceShared::new(
                    slot.index,
                    self.shared.config.max_tool_calls,
                )),
                actor: ChildActor::Gone,
            };
            choice.spawn(&self.shared);
            new_choices.push(choice.shared.clone());
            self.choices.push(choice);
        }
        for (slot, choice) in self.router.slots.iter_mut().zip(&mut self.choices) {
            if slot.batch.is_empty() {
                continue;
            }
            let batch = std::mem::take(&mut slot.batch);
            if let ChildActor::Retired = choice.actor {
                Box::pin(choice.retired_gone()).await;
                choice.spawn(&self.shared);
            }
            if let ChildActor::Live(actor) = &choice.actor {
                if actor.send_message(ChoiceMsg::Updates(batch)).is_err() {
                    choice.actor = ChildActor::Gone;
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

    async fn end(&mut self, outcome: Result<(), Error>) {
        for choice in &mut self.choices {
            match &choice.actor {
                // Queued behind its updates. If the actor is stopping, its guard ends the
                // choice instead.
                ChildActor::Live(actor) => {
                    let _ = actor.send_message(ChoiceMsg::End(outcome.clone()));
                }
                ChildActor::Retired => {
                    Box::pin(choice.retired_gone()).await;
                    choice.shared.lock().settle(outcome.clone());
                    choice.actor = ChildActor::Gone;
                }
                ChildActor::Gone => {}
            }
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
            choices: Vec::new(),
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
                let step = {
                    let ReaderState {
                        feed,
                        router,
                        shared,
                        choices,
                        ..
                    } = &mut *state;
                    // A panic while reading or routing (or in the upstream stream itself) ends
                    // the stream with a typed error after what was routed before it is
                    // delivered.
                    let mut pull = pin!(AssertUnwindSafe(feed.pull(router)).catch_unwind());
                    match futures::poll!(pull.as_mut()) {
                        Poll::Ready(step) => step,
                        // The upstream is waiting: if it stays quiet for `hibernate_after`,
                        // the choice actors retire until the next update (their state lives
                        // in the choices, not in them). The timer exists only while waiting.
                        Poll::Pending => match shared.config.hibernate_after {
                            Some(after) if choices.iter().any(ChoiceSlot::is_live) => {
                                // Boxed: a timer in the handler's state would enlarge the
                                // reader's boxed message loop, which every idle completion
                                // holds, by about a kilobyte.
                                let quiet = Box::pin(tokio::time::sleep(after));
                                match select(pull, quiet).await {
                                    Either::Left((step, _)) => step,
                                    Either::Right(((), pull)) => {
                                        retire_all(choices);
                                        pull.await
                                    }
                                }
                            }
                            _ => pull.await,
                        },
                    }
                };
                let step = step.unwrap_or_else(|panic| {
                    Step::End(Err(Error::ActorFailed {
                        choice: None,
                        message: panic_message(&panic),
                    }))
                });
                state.flush().await;
                match step {
                    Step::Continue => myself.send_message(ReaderMsg::Pull)?,
                    Step::End(outcome) => {
                        // The choice actors apply their queues and the end on their own.
                        state.end(outcome).await;
                        myself.stop(None);
                    }
                }
            }
        }
        Ok(())
    }
}
