//! The lifecycle of one choice: its merged message, its event log, and where it is in its
//! life ([`Phase`]). Pure: the actors keep it behind a lock (`shared`), [`Demux`](crate::Demux)
//! keeps it as it is; the transitions are the same.

use serde_json::Value;

use crate::decode::DecodeError;
use crate::error::Error;
use crate::event::{ChoiceEvent, Warning, WarningKind};
use crate::event_log::EventLog;
use crate::merge::{ChoiceAccumulator, ChoiceUpdate};
use crate::response::{ChatCompletion, ChoiceOutput};
use crate::split::{BatchPool, Meta};
use crate::waiters::Waiters;

/// Where a choice is in its life. Every transition is a method of [`ChoiceState`].
///
/// ```text
/// Open ──finish / clean end──▶ Closed ──late update breaks a limit──▶ Closed { late_error }
///   ├──own bad update / stream error / actor failure──▶ Failed
///   ├──cancel, every update received before it handled──▶ Cancelled
///   └──cancel, updates received before it still queued──▶ Cancelling
///                  ├──they are handled──▶ Cancelled
///                  └──one of them finishes or fails the choice──▶ Closed / Failed
/// ```
///
/// `Closed`, `Failed` and `Cancelled` are final for the sub-streams; only `Closed` still
/// merges (late) updates.
#[derive(Debug, Clone)]
pub(crate) enum Phase {
    /// Taking updates; the sub-streams are open.
    Open,
    /// The sub-streams ended `Ok`: at the choice's finish, or at a clean end of the stream.
    /// Updates after the finish still merge into the message (and are warned about); an
    /// error one of them causes is kept for `message()` and `collect()`.
    Closed {
        /// (Boxed, as in `Failed`: a choice carries the size of its phase; errors are rare.)
        late_error: Option<Box<Error>>,
    },
    /// Ended with an error, its own or the stream's before its finish: the sub-streams end
    /// with it, and the choice's later updates are ignored (counted in a warning).
    Failed(Box<Error>),
    /// Cancelled while batches received before the cancel were still queued for the choice's
    /// actor: it takes updates as `Open` does until batch number `after` is handled, then
    /// becomes `Cancelled` (unless one of those batches finished or failed the choice). A
    /// cancel never drops an update that came before it.
    Cancelling { after: u64 },
    /// Cancelled by a caller before its finish: the sub-streams ended `Ok` after a
    /// [`ChoiceEvent::Cancelled`] event; later updates are dropped (neither applied nor
    /// counted as errors), and the message stays what it was.
    Cancelled,
}

#[derive(Debug)]
pub(crate) struct ChoiceState {
    pub acc: ChoiceAccumulator,
    pub events: EventLog,
    pub phase: Phase,
    /// The stream is over for this choice: no more writes will come.
    pub settled: bool,
    /// Batches handled so far: applied, ignored, or failed by a panic in their parse or
    /// merge (counted once that failure is recorded). Each batch carries its number, so that
    /// the choice's successive actors (one retires while the upstream is quiet, the next
    /// update starts another) apply them in order; while it equals the batches sent, nobody
    /// is working on the choice and the reader may apply the next batch itself.
    pub handled: u64,
    /// Updates ignored because the choice had failed, and the line of the first.
    pub ignored: (u64, u64),
    pub waiters: Waiters,
    /// The choice's emptied batches, handed back for the reader to fill again.
    pub spare: BatchPool,
}

impl ChoiceState {
    pub fn new(index: u32, max_tool_calls: usize) -> Self {
        ChoiceState {
            acc: ChoiceAccumulator::new(index, max_tool_calls),
            events: EventLog::default(),
            phase: Phase::Open,
            settled: false,
            handled: 0,
            ignored: (0, 0),
            waiters: Waiters::default(),
            spare: BatchPool::default(),
        }
    }

    /// The assembled choice and the error that ended it, if any.
    pub fn outcome(&self) -> (ChoiceOutput, Option<Error>) {
        let error = match &self.phase {
            Phase::Open | Phase::Cancelling { .. } | Phase::Cancelled => None,
            Phase::Closed { late_error } => late_error.as_deref().cloned(),
            Phase::Failed(e) => Some((**e).clone()),
        };
        (self.output(), error)
    }

    /// The choice as assembled so far; a cancelled one is flagged, without a finish reason.
    pub fn output(&self) -> ChoiceOutput {
        let mut output = self.acc.output();
        if self.is_cancelled() {
            output.cancelled = true;
            output.finish_reason = None;
        }
        output
    }

    /// How the sub-streams ended, once they have.
    pub fn closed(&self) -> Option<Result<(), Error>> {
        match &self.phase {
            Phase::Open | Phase::Cancelling { .. } => None,
            Phase::Closed { .. } | Phase::Cancelled => Some(Ok(())),
            Phase::Failed(e) => Some(Err((**e).clone())),
        }
    }

    /// Whether the choice was cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.phase, Phase::Cancelled)
    }

    /// Cancels the choice if it is still open, once the batches `routed` to it before the
    /// cancel are handled (at once if they are): appends [`ChoiceEvent::Cancelled`], ends the
    /// sub-streams, and drops its later updates. Returns whether it was open (a finished,
    /// failed, cancelled or cancelling choice is left as it is).
    pub fn cancel_after(&mut self, routed: u64) -> bool {
        if !matches!(self.phase, Phase::Open) || self.settled {
            return false;
        }
        match self.handled >= routed {
            true => self.cancel_now(),
            false => self.phase = Phase::Cancelling { after: routed },
        }
        true
    }

    /// Cancels the choice if it is open, after what it has handled (nothing else was routed
    /// to it: [`Demux`](crate::Demux), or a choice the reader has not routed to yet).
    pub fn cancel(&mut self) -> bool {
        self.cancel_after(self.handled)
    }

    fn cancel_now(&mut self) {
        let mut event = vec![ChoiceEvent::Cancelled];
        self.events.append(&mut event);
        self.phase = Phase::Cancelled;
        self.waiters.wake_all();
    }

    /// Whether a cancel is waiting for the batches received before it.
    pub fn is_cancelling(&self) -> bool {
        matches!(self.phase, Phase::Cancelling { .. })
    }

    /// Whether the choice still merges updates.
    fn takes_updates(&self) -> bool {
        !self.settled
            && matches!(
                self.phase,
                Phase::Open | Phase::Cancelling { .. } | Phase::Closed { late_error: None }
            )
    }

    /// Whether batch number `seq` is next (the earlier ones are handled), or the choice no
    /// longer takes updates (then the batch is only counted).
    pub fn turn_of(&self, seq: u64) -> bool {
        self.handled + 1 >= seq || !self.takes_updates()
    }

    /// One batch is handled (by [`apply`](Self::apply) or [`skip_batch`](Self::skip_batch),
    /// or failed by a panic): counts it, lets a cancel waiting for it take effect, and wakes
    /// the readers and any actor waiting its turn.
    pub fn batch_handled(&mut self) {
        self.handled += 1;
        if let Phase::Cancelling { after } = self.phase
            && self.handled >= after
        {
            self.cancel_now();
        }
        self.waiters.wake_all();
    }

    /// Applies one batch (parsed by the choice's actor), appending its events to the log;
    /// `decoded` is the batch's parse error, if any, after the updates before it.
    /// Warnings go to `warnings`, for the completion. The caller then calls
    /// [`batch_handled`](Self::batch_handled), which wakes the readers. `updates` is left
    /// empty, its buffer kept for the next batch.
    pub fn apply(
        &mut self,
        updates: &mut Vec<ChoiceUpdate>,
        decoded: Result<(), DecodeError>,
        buf: &mut Vec<ChoiceEvent>,
        warnings: &mut Vec<Warning>,
    ) {
        if self.is_cancelled() {
            // Dropped: the caller no longer wants this choice.
            updates.clear();
            return;
        }
        if !self.takes_updates() {
            let undecoded = match &decoded {
                Ok(()) => 0,
                Err(d) => 1 + d.after,
            };
            let line = updates
                .first()
                .map(|u| u.line)
                .or(decoded.as_ref().err().map(|d| d.line));
            self.ignore(updates.len() as u64 + undecoded, line);
            updates.clear();
            return;
        }
        for update in updates.drain(..) {
            let was_finished = self.acc.is_finished();
            let result = self.acc.apply(update, buf);
            warnings.extend(buf.iter().filter_map(|e| match e {
                ChoiceEvent::Warning(w) => Some(w.clone()),
                _ => None,
            }));
            if was_finished {
                // The sub-streams ended at the finish: late data goes to the message and the
                // completion's warnings only.
                buf.clear();
            } else {
                self.events.append(buf);
                if self.acc.is_finished() {
                    self.phase = Phase::Closed { late_error: None };
                }
            }
            if let Err(e) = result {
                self.fail(e);
                break;
            }
        }
        if let Err(d) = decoded {
            self.fail(d.error);
            self.ignore(d.after, Some(d.after_line));
        }
    }

    /// Skips a whole batch, unparsed, when the choice no longer takes updates: counted when it
    /// failed, dropped silently when it was cancelled, and emptied (its buffers kept) either
    /// way; `false` when it takes updates (the caller parses and applies it).
    pub fn skip_batch(&mut self, batch: &mut crate::split::Batch) -> bool {
        if self.takes_updates() {
            return false;
        }
        if !self.is_cancelled() {
            let line = batch.updates.first().map(|u| u.line);
            self.ignore(batch.updates.len() as u64, line);
        }
        batch.clear();
        true
    }

    /// Counts updates ignored after the choice failed (`line`: the first one's, if known).
    fn ignore(&mut self, updates: u64, line: Option<u64>) {
        let (count, first) = &mut self.ignored;
        if updates == 0 {
            return;
        }
        if *count == 0 {
            *first = line.unwrap_or(0);
        }
        *count += updates;
    }

    /// The choice's own update (or its actor) failed: ends the sub-streams with the error, or,
    /// if they had already ended at the finish, keeps it as the late error.
    pub fn fail(&mut self, error: Error) {
        match &mut self.phase {
            Phase::Open | Phase::Cancelling { .. } => self.phase = Phase::Failed(Box::new(error)),
            Phase::Closed { late_error } => {
                late_error.get_or_insert(Box::new(error));
            }
            Phase::Failed(_) | Phase::Cancelled => {}
        }
        self.waiters.wake_all();
    }

    /// The stream is over for this choice (`outcome`: how it ended): closes the sub-streams
    /// if they are open, and settles the choice. Returns a warning when updates were
    /// ignored after the choice failed.
    pub fn settle(&mut self, index: u32, outcome: Result<(), Error>) -> Option<Warning> {
        if self.settled {
            return None;
        }
        if let (Phase::Open, Ok(())) = (&self.phase, &outcome) {
            // A finish kept open for late argument fragments takes effect at the end.
            let mut late = Vec::new();
            self.acc.end_of_stream(&mut late);
            self.events.append(&mut late);
        }
        if self.is_cancelling() {
            // (Only when the stream ends without its queued batches: a kill.)
            self.cancel_now();
        }
        if let Phase::Open = self.phase {
            self.phase = match outcome {
                Ok(()) => Phase::Closed { late_error: None },
                Err(e) => Phase::Failed(Box::new(e)),
            };
        }
        self.settled = true;
        self.spare.clear();
        self.waiters.wake_all();
        let (updates, line) = self.ignored;
        (updates > 0).then_some(Warning {
            choice: Some(index),
            line,
            kind: WarningKind::IgnoredAfterFailure { updates },
        })
    }
}

/// The completion from its facts, the stream's end and every choice's outcome (in order of
/// first appearance); the error reported is the stream's, else the first choice's.
pub(crate) fn assemble(
    meta: Meta,
    per_choice: &std::collections::BTreeMap<u32, u64>,
    end: Option<&Result<(), Error>>,
    outcomes: impl Iterator<Item = (ChoiceOutput, Option<Error>)>,
) -> (ChatCompletion, Option<Error>) {
    let mut error = match end {
        Some(Err(e)) => Some(e.clone()),
        _ => None,
    };
    let mut outputs = Vec::new();
    for (output, choice_error) in outcomes {
        if error.is_none() {
            error = choice_error;
        }
        outputs.push(output);
    }
    outputs.sort_by_key(|c| c.index);
    // Each choice's own reported usage, where the stream carried it.
    crate::estimate::fill_choice_usage(per_choice, &mut outputs, None);
    let completion = ChatCompletion {
        id: meta.id.unwrap_or_default(),
        created: meta.created.unwrap_or_default(),
        model: meta.model.unwrap_or_default(),
        system_fingerprint: meta.system_fingerprint,
        service_tier: meta.service_tier,
        choices: outputs,
        usage: None,
        prompt_filter_results: match meta.prompt_filter_results.len() {
            0 => None,
            1 => meta.prompt_filter_results.into_iter().next(),
            _ => Some(Value::Array(meta.prompt_filter_results)),
        },
        ..ChatCompletion::default()
    };
    (completion, error)
}
