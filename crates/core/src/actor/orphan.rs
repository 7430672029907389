//! The reader as a choice's last writer: what it publishes for a choice whose actor is gone
//! (a panic, a failed start, the reader's own end) and for a declared choice that never
//! appeared (nothing ever ran it). The router decides when; these write the logs.

use std::collections::HashSet;
use std::sync::Arc;

use choicewise_proto::driver::{CancelReason, ChoiceCore, Phase};
use choicewise_proto::{ChoiceOutput, Error};

use crate::completion::{ChoiceEntry, CompletionState};
use crate::log::ChoiceLog;

/// What is left of a choice whose actor is gone, as its log published it.
pub(crate) fn orphan_of(log: &ChoiceLog) -> ChoiceCore {
    ChoiceCore::orphan(log.index, log.lock().phase.clone())
}

/// Publishes the phase of a choice whose actor is gone, the reader taking the log over; its
/// message is the one published at its close, or rebuilt from its events. Refused, as a
/// settled log refuses every write, when the choice had settled.
pub(crate) fn publish_orphan(log: &Arc<ChoiceLog>, phase: &Phase) {
    let output = {
        let published = log.lock();
        published.outcome(log.index).0
    };
    let output = mark_cancelled(output, phase);
    let published = log
        .take_over()
        .publish(&mut Vec::new(), phase, || Some(output));
    if let Err(refused) = published {
        tracing::trace!(
            index = log.index,
            ?refused,
            "an orphan's phase not published"
        );
    }
}

fn mark_cancelled(mut output: ChoiceOutput, phase: &Phase) -> ChoiceOutput {
    if phase.is_cancelled() {
        output.cancelled = true;
        output.finish_reason = None;
    }
    output
}

/// Settles every choice not settled yet with `error`: the reader stopped before the stream
/// ended, and its children died with it.
pub(crate) fn settle_all(entries: &[Arc<ChoiceEntry>], error: &Error) {
    for entry in entries {
        let mut orphan = orphan_of(&entry.log);
        if orphan.phase().is_settled() {
            continue;
        }
        orphan.settle(Err(error.clone()), &mut Vec::new());
        publish_orphan(&entry.log, orphan.phase());
    }
}

/// Lists the choices of upstream `k` declared (`0..n`) and never seen, settled: failed with
/// the upstream's error (its request failed before they appeared), or cancelled when the
/// upstream was dropped (nobody wanted them). Nothing runs them: the reader is their only
/// writer. Whether it listed any.
pub(crate) fn list_unseen(
    state: &mut CompletionState,
    k: usize,
    n: u32,
    seen: &HashSet<u32>,
    dropped: bool,
    outcome: &Result<(), Error>,
) -> bool {
    let mut listed = false;
    for local in (0..n).filter(|i| !seen.contains(i)) {
        let index = state.global_index(k, local);
        let log = Arc::new(ChoiceLog::new(index));
        let mut core = ChoiceCore::new(index, 0);
        let mut events = Vec::new();
        if dropped {
            // Dropped by a close, for its reason; else because none of its choices was
            // wanted any more.
            let reason = state
                .phase
                .closing()
                .map_or(CancelReason::Closing, |c| c.reason);
            core.cancel(reason, &mut events);
        }
        core.settle(outcome.clone(), &mut events);
        // A new log: its first writer, refused nothing.
        let published = log
            .take_over()
            .publish(&mut events, core.phase(), || Some(core.output()));
        if let Err(refused) = published {
            tracing::trace!(index, ?refused, "a new log refused its first write");
            debug_assert!(false, "a new log refused its first write: {refused:?}");
        }
        state
            .choices
            .push(Arc::new(ChoiceEntry { log, addr: None }));
        listed = true;
    }
    listed
}
