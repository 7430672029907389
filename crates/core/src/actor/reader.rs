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

mod state;

use std::sync::Arc;
use std::task::Waker;

use choicewise_proto::driver::{Refused, Router, Splitter};
use choicewise_proto::{Error, ErrorDetail};
use ractor::{Actor, ActorProcessingErr, ActorRef, ActorRuntime, SupervisionEvent};

use super::choice::ChoiceActorState;
use super::wake::{PollWaker, QuietTimer};
use crate::completion::CompletionShared;
use crate::msg::ReaderMsg;
use crate::source::{Input, Upstream};
pub(crate) use state::ReaderState;

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
        let closing = args.completion.closing();
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
            ReaderMsg::Close(close) => {
                let splitter = &state.splitter;
                let told = (state.router).close(close, |slot| splitter.choice_finished(slot));
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
