//! The actors: one reader per completion, one actor per choice.
//!
//! ```text
//!  upstream ──reads──▶ ReaderActor ──Updates(batch)──▶ ChoiceActor 0 ──append──▶ log 0 ──▶ handles
//!                      (frame, parse,  ──Updates(batch)──▶ ChoiceActor 2 ──append──▶ log 2 ──▶ handles
//!                       route)         ──End(result)───▶ every ChoiceActor
//! ```
//!
//! The reader pulls one read at a time (it asks itself for the next with a `Pull` message, so
//! a kill interrupts a pending read and drops the upstream), routes every chunk of the read,
//! and sends each choice that received updates one message with the whole batch. A choice
//! actor is spawned, linked to the reader, when its index first appears. Both actors keep a
//! guard in their state: however an actor ends (finish, panic, kill), the guard closes what
//! it owned with an error if it was not closed properly, so no reader of a log ever hangs.

pub(crate) mod choice;
pub(crate) mod reader;

use std::sync::Arc;

use ractor::ActorRef;

use crate::shared::CompletionShared;

/// Keeps the actors of one completion alive while any handle exists; stops them (and so
/// drops the upstream) when the last handle goes.
pub(crate) struct Lifetime {
    readers: Vec<ActorRef<reader::ReaderMsg>>,
    pub(crate) shared: Arc<CompletionShared>,
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.shared.cancel();
        for reader in &self.readers {
            reader.kill();
        }
    }
}

impl Lifetime {
    pub fn new(readers: Vec<ActorRef<reader::ReaderMsg>>, shared: Arc<CompletionShared>) -> Self {
        Lifetime { readers, shared }
    }
}
