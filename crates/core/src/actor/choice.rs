//! The choice actor: the one owner of its choice. It parses the choice's raw updates, merges
//! them ([`ChoiceCore`]), and publishes the events and the phase they lead to in the choice's
//! log, on whichever core it runs, side by side with the reader and the other choices.
//!
//! It is spawned linked to its reader, which supervises it: a malformed update fails the
//! choice here (the actor stays, counting the choice's later updates); a panic stops the
//! actor, and the reader, handling that supervision event, fails the choice with the panic's
//! message. When the upstream goes quiet the actor stops on [`ChoiceMsg::Retire`], and its
//! state goes back to the reader in the supervision event, for the next actor.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use choicewise_proto::driver::{Batch, BatchPool, Child, ChoiceCore, Closed, Phase};
use choicewise_proto::{ChoiceEvent, ErrorDetail, Warning};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, ActorRuntime, SpawnErr};

use crate::completion::CompletionShared;
use crate::log::{ChoiceLog, LogWriter, lock};
use crate::msg::{ChoiceMsg, ReaderMsg};

pub(crate) struct ChoiceActor;

/// What a choice's actor hands back to the reader, beside the mailbox (one per actor, made
/// by the reader when it starts one): the emptied batches, for the reader to fill again (the
/// pool: the actor puts each batch it applied and empties it when it ends or retires, the
/// reader takes, under its lock), and how many batches the actor
/// has applied (written by the actor alone; the reader, which counts those it sent, knows
/// from it whether the actor still has updates to work through).
#[derive(Default)]
pub(crate) struct Handback {
    pub pool: Mutex<BatchPool>,
    pub applied: AtomicU64,
}

/// A running choice actor as its reader holds it: its address, and what it hands back.
/// New with each actor.
pub(crate) struct Running {
    pub actor: ActorRef<ChoiceMsg>,
    pub handback: Arc<Handback>,
}

impl Running {
    /// Starts a choice's actor with its state, linked to its reader (`slot`: the choice's
    /// there), the writer of the choice's log from now.
    pub fn start(
        core: Box<ChoiceCore>,
        log: &Arc<ChoiceLog>,
        completion: &Arc<CompletionShared>,
        reader: &ActorRef<ReaderMsg>,
        slot: usize,
    ) -> Result<Running, SpawnErr> {
        let handback = Arc::new(Handback::default());
        let args = ChoiceArgs {
            core,
            writer: log.take_over(),
            completion: completion.clone(),
            handback: handback.clone(),
            reader: reader.clone(),
            slot,
        };
        let (actor, _) =
            ActorRuntime::spawn_linked_instant(None, ChoiceActor, args, reader.get_cell())?;
        Ok(Running { actor, handback })
    }
}

impl Child for Running {
    type Id = ActorId;

    fn id(&self) -> ActorId {
        self.actor.get_id()
    }

    fn applied(&self) -> u64 {
        self.handback.applied.load(Ordering::Acquire)
    }
}

/// What a choice actor starts with: the choice's state (new, or handed back by the actor
/// before it), where it publishes, and where it reports.
pub(crate) struct ChoiceArgs {
    pub core: Box<ChoiceCore>,
    /// The right to write the choice's log, for as long as this actor runs.
    pub writer: LogWriter,
    pub completion: Arc<CompletionShared>,
    pub handback: Arc<Handback>,
    pub reader: ActorRef<ReaderMsg>,
    pub slot: usize,
}

pub(crate) struct ChoiceActorState {
    pub core: Box<ChoiceCore>,
    writer: LogWriter,
    completion: Arc<CompletionShared>,
    handback: Arc<Handback>,
    reader: ActorRef<ReaderMsg>,
    slot: usize,
    /// The events of one message, reused.
    events: Vec<ChoiceEvent>,
    warnings: Vec<Warning>,
    #[cfg(feature = "diagnostics")]
    _live: crate::diagnostics::LiveActor,
}

impl ChoiceActorState {
    /// Publishes the events of one message and the phase they led to; tells the reader when
    /// the choice failed on its own (it no longer wants the upstream's updates for it).
    fn publish(&mut self, was_open: bool) {
        // The warnings first: whoever sees the choice settled (`collect`) finds them.
        if !self.warnings.is_empty() {
            self.completion.lock().warnings.append(&mut self.warnings);
        }
        let core = &mut self.core;
        let phase = core.phase().clone();
        // Refused only once the reader has taken the choice over (this actor is being
        // stopped with it) or after the choice settled: nothing of this actor's is wanted.
        let published = self
            .writer
            .publish(&mut self.events, &phase, || match &phase {
                Phase::Open => None,
                // Settled: the actor stops, its message is moved to the log rather than copied.
                Phase::Settled(_) => Some(core.take_output()),
                _ => Some(core.output()),
            });
        if let Err(refused) = published {
            tracing::trace!(slot = self.slot, ?refused, "a choice's write not published");
        }
        let core = &self.core;
        let stopped = core.stopped_at_bound();
        let unwanted = match core.phase().closed() {
            Some(Closed::Failed(e)) => {
                Some(matches!(e.detail(), ErrorDetail::ChoiceTooLarge { .. }))
            }
            // Finished at its bound of tokens: its upstream is no longer read for it.
            Some(_) if stopped => Some(true),
            _ => None,
        };
        if let (true, Some(bounded)) = (was_open, unwanted) {
            // Fails only once the reader has stopped: nothing reads the upstream any more.
            let told = self.reader.send_message(ReaderMsg::Failed {
                slot: self.slot,
                bounded,
            });
            if let Err(e) = told {
                tracing::trace!(slot = self.slot, error = %e, "a failure not told: the reader has stopped");
            }
        }
    }

    fn apply(&mut self, mut batch: Batch) {
        let was_open = matches!(self.core.phase(), Phase::Open);
        #[cfg(feature = "fault-injection")]
        let panic_after = self.injected_faults(&mut batch);
        self.core
            .apply_batch(&mut batch, &mut self.events, &mut self.warnings);
        self.publish(was_open);
        #[cfg(feature = "fault-injection")]
        if panic_after {
            panic!("injected fault in choice {}", self.core.index());
        }
        lock(&self.handback.pool).put(batch);
        self.handback.applied.fetch_add(1, Ordering::Release);
    }

    /// Test-only faults, as the completion's hook says: a stall, and a panic after the
    /// updates before it are applied and published.
    #[cfg(feature = "fault-injection")]
    fn injected_faults(&mut self, batch: &mut Batch) -> bool {
        let hook = &self.completion.config.fault_hook;
        match hook.panic_at(self.core.index(), batch) {
            Some(at) => {
                batch.truncate(at);
                true
            }
            None => false,
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
            core: args.core,
            writer: args.writer,
            completion: args.completion,
            handback: args.handback,
            reader: args.reader,
            slot: args.slot,
            events: Vec::new(),
            warnings: Vec::new(),
            #[cfg(feature = "diagnostics")]
            _live: crate::diagnostics::LiveActor::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ChoiceMsg>,
        message: ChoiceMsg,
        state: &mut ChoiceActorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ChoiceMsg::Batch(batch) => state.apply(batch),
            ChoiceMsg::Cancel(reason) => {
                let was_open = matches!(state.core.phase(), Phase::Open);
                state.core.cancel(reason, &mut state.events);
                state.publish(was_open);
            }
            ChoiceMsg::End(outcome) => {
                let was_open = matches!(state.core.phase(), Phase::Open);
                if let Some(w) = state.core.settle(outcome, &mut state.events) {
                    state.warnings.push(w);
                }
                state.publish(was_open);
                *lock(&state.handback.pool) = BatchPool::default();
                myself.stop(None);
            }
            ChoiceMsg::Retire => {
                // Quiet: the buffers kept for the next reads are freed.
                *lock(&state.handback.pool) = BatchPool::default();
                state.core.release_buffers();
                myself.stop(None);
            }
        }
        Ok(())
    }
}
