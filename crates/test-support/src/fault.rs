//! The core's tests' fault hook: content deltas carrying a marker make their choice's actor
//! panic or stall (`CompletionsBuilder::fault_hook(Markers)`). The markers live here, in the
//! tests' support, not in the protocol.

use std::time::Duration;

use choicewise_core::fault::{Fault, FaultHook};

/// A content delta carrying this text makes its choice's actor panic, after the updates
/// before it in the batch are applied and published.
pub const PANIC_CHOICE: &str = "choicewise:panic-choice";

/// A content delta starting with this text makes its choice's actor block its thread for
/// 50 ms before applying the batch (which then merges as usual): a slow actor.
pub const SLOW_CHOICE: &str = "choicewise:slow-choice";

/// The hook of [`PANIC_CHOICE`] and [`SLOW_CHOICE`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Markers;

impl FaultHook for Markers {
    fn on_update(&self, _choice: u32, update: Option<&str>) -> Option<Fault> {
        let update = update?;
        if update.contains(PANIC_CHOICE) {
            Some(Fault::Panic)
        } else if update.contains(SLOW_CHOICE) {
            Some(Fault::Stall(Duration::from_millis(50)))
        } else {
            None
        }
    }
}
