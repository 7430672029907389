//! Test-only fault injection (feature `fault-injection`): a hook a test installs on a
//! completion ([`CompletionsBuilder::fault_hook`](crate::CompletionsBuilder::fault_hook)) to
//! make a choice's actor panic or stall at an update of its choosing. The protocol knows
//! nothing of it: the actor asks the hook before it applies each batch.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What a hook injects at an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The choice's actor panics after applying and publishing the updates before this one
    /// (the reader then fails the choice with the panic's message).
    Panic,
    /// The choice's actor blocks its thread this long before applying the batch (which then
    /// applies as usual): a slow actor.
    Stall(Duration),
}

/// A test's fault hook.
pub trait FaultHook: Send + Sync + 'static {
    /// Asked for each update a choice's actor is about to apply: the choice's index and the
    /// update's JSON text (`None` for an update parsed before it came). The first `Panic` of
    /// a batch stops the asking.
    fn on_update(&self, choice: u32, update: Option<&str>) -> Option<Fault>;
}

/// The hook of a completion, if one was installed.
#[derive(Clone, Default)]
pub(crate) struct Hook(pub Option<Arc<dyn FaultHook>>);

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Hook(installed)"
        } else {
            "Hook(none)"
        })
    }
}

impl PartialEq for Hook {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Hook {
    /// Asks the hook about a batch: stalls as it says, and returns how many of the batch's
    /// updates come before the first `Panic`, if one does.
    pub fn panic_at(&self, choice: u32, batch: &choicewise_proto::driver::Batch) -> Option<usize> {
        let hook = self.0.as_ref()?;
        for (i, text) in batch.update_texts().enumerate() {
            match hook.on_update(choice, text) {
                Some(Fault::Stall(time)) => std::thread::sleep(time),
                Some(Fault::Panic) => return Some(i),
                None => {}
            }
        }
        None
    }
}
