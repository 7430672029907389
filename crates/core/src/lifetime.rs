//! [`Lifetime`]: what keeps a completion's actors running while any handle exists.

use std::sync::{Arc, Mutex};

use ractor::ActorRef;

use crate::completion::CompletionShared;
use crate::log::lock;
use crate::msg::ReaderMsg;

/// Shared by the completion, every choice and every sub-stream: when the last goes, every
/// reader is killed, and their choice actors with them (the supervision tree), dropping the
/// upstreams.
#[derive(Debug)]
pub(crate) struct Lifetime {
    readers: Mutex<Vec<ActorRef<ReaderMsg>>>,
    pub(crate) shared: Arc<CompletionShared>,
}

impl Lifetime {
    pub fn new(shared: Arc<CompletionShared>) -> Self {
        Lifetime {
            readers: Mutex::new(Vec::new()),
            shared,
        }
    }

    /// A reader to kill with the completion.
    pub fn keep(&self, reader: ActorRef<ReaderMsg>) {
        lock(&self.readers).push(reader);
    }
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        for reader in lock(&self.readers).iter() {
            reader.kill();
        }
    }
}
