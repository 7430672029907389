//! The lifecycle of one choice: [`ChoiceCore`] holds everything merged so far and where the
//! choice is in its life ([`Phase`]). Pure: whoever owns a `ChoiceCore` (the choice's actor in
//! `choicewise-core`, or [`Demux`](crate::Demux)) is the only one that changes it, and
//! publishes the events each call returns.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::decode::{Repeats, decode_batch};
use crate::error::Error;
use crate::event::{ChoiceEvent, Text, Warning, WarningKind};
use crate::logprobs::LogprobsKept;
use crate::merge::{ChoiceAccumulator, ChoiceUpdate};
use crate::response::{ChatCompletion, ChoiceOutput};
use crate::split::{Batch, Meta};
use crate::usage::{ChoiceUsage, Usage, UsageSource};

/// Where a choice is in its life. Every transition is a method of [`ChoiceCore`].
///
/// ```text
///            ┌─ finish (or a clean end of the stream) ─▶ Closed(Ended)
///   Open ────┼─ its own bad update, the stream's error ─▶ Closed(Failed)
///            └─ cancel(reason) ─────────────────────────▶ Closed(Cancelled(reason))
///
///   Open / Closed(..) ── the stream is over for it (settle) ──▶ Settled(..)   (final)
/// ```
///
/// `Closed` ends the choice's sub-streams; only `Closed(Ended { late_error: None })` still
/// merges updates (data after the finish goes to the message and the warnings). `Settled`
/// takes no more writes.
#[derive(Debug, Clone)]
pub enum Phase {
    /// Taking updates; the sub-streams are open.
    Open,
    /// The sub-streams ended; the stream goes on.
    Closed(Closed),
    /// The stream is over for the choice: how it closed, final.
    Settled(Closed),
}

/// How a choice's sub-streams ended.
#[derive(Debug, Clone)]
pub enum Closed {
    /// `Ok`: at the choice's finish, or at a clean end of the stream. Updates after the
    /// finish still merge into the message; an error one of them causes is kept for the
    /// message and the completion.
    Ended {
        /// (Boxed: a choice carries the size of its phase; errors are rare.)
        late_error: Option<Box<Error>>,
    },
    /// With an error, its own or the stream's; later updates are counted and ignored.
    Failed(Box<Error>),
    /// Cancelled before its finish, for this reason: a [`ChoiceEvent::Cancelled`] ended the
    /// sub-streams; later updates are dropped.
    Cancelled(CancelReason),
}

/// Why a choice was cancelled, carried from the cancel to its [`ChoiceEvent::Cancelled`]
/// and its [`Closed::Cancelled`]; [`by`](Self::by) says who sent it (as h2's reset reason
/// and `Initiator`).
///
/// ```
/// use choicewise_proto::ChoiceEvent;
/// use choicewise_proto::driver::{CancelReason, CancelledBy, ChoiceCore, Closed};
///
/// let mut core = ChoiceCore::new(0, 8);
/// let mut events = Vec::new();
/// assert!(core.cancel(CancelReason::LowConfidence, &mut events));
/// assert_eq!(events, [ChoiceEvent::Cancelled(CancelReason::LowConfidence)]);
/// assert!(matches!(
///     core.phase().closed(),
///     Some(Closed::Cancelled(CancelReason::LowConfidence))
/// ));
/// assert_eq!(CancelReason::LowConfidence.by(), CancelledBy::Library);
/// ```
///
/// The set is closed: a new reason is a new version, and every match on it must say what it
/// means (the gateway's who-stopped-it, its log labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelReason {
    /// The program asked, giving no reason (a handle's `cancel`).
    Asked,
    /// A vote guided by confidence stopped it: a group of its tokens fell below the
    /// threshold.
    LowConfidence,
    /// A pick decided without it: it was not among the choices picked.
    Decided,
    /// The program closed the completion (every choice but those kept is cancelled), or
    /// the choice's upstream was dropped, no choice of it wanted, before the choice
    /// appeared.
    Closing,
    /// Whoever was to read the choice went away (a gateway's client disconnected).
    ReaderGone,
    /// A deadline passed before the choice finished.
    Deadline,
    /// The program is shutting down.
    ShuttingDown,
}

/// Who sent a cancel: the program that reads the choices, or the library on its own (its
/// picks).
///
/// ```
/// use choicewise_proto::driver::{CancelReason, CancelledBy};
/// assert_eq!(CancelReason::ReaderGone.by(), CancelledBy::Program);
/// assert_eq!(CancelReason::Decided.by(), CancelledBy::Library);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelledBy {
    /// The program, through a handle ([`CancelReason::Asked`], [`CancelReason::Closing`],
    /// [`CancelReason::ReaderGone`], [`CancelReason::Deadline`],
    /// [`CancelReason::ShuttingDown`]).
    Program,
    /// The library's pick ([`CancelReason::LowConfidence`], [`CancelReason::Decided`]).
    Library,
}

impl CancelReason {
    /// Who sent the cancel.
    ///
    /// ```
    /// use choicewise_proto::driver::{CancelReason, CancelledBy};
    /// assert_eq!(CancelReason::Asked.by(), CancelledBy::Program);
    /// ```
    pub fn by(self) -> CancelledBy {
        match self {
            CancelReason::LowConfidence | CancelReason::Decided => CancelledBy::Library,
            CancelReason::Asked
            | CancelReason::Closing
            | CancelReason::ReaderGone
            | CancelReason::Deadline
            | CancelReason::ShuttingDown => CancelledBy::Program,
        }
    }

    /// Its name: `asked`, `low_confidence`, `decided`, `closing`, `reader_gone`,
    /// `deadline`, `shutting_down`.
    ///
    /// ```
    /// use choicewise_proto::driver::CancelReason;
    /// assert_eq!(CancelReason::ReaderGone.as_str(), "reader_gone");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::Asked => "asked",
            CancelReason::LowConfidence => "low_confidence",
            CancelReason::Decided => "decided",
            CancelReason::Closing => "closing",
            CancelReason::ReaderGone => "reader_gone",
            CancelReason::Deadline => "deadline",
            CancelReason::ShuttingDown => "shutting_down",
        }
    }
}

impl std::fmt::Display for CancelReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a completion that is closing keeps (indexes of the completion), and why the other
/// choices, and those still to appear, are cancelled.
///
/// ```
/// use choicewise_proto::driver::{CancelReason, Close};
/// let close = Close::new([0u32], CancelReason::Decided);
/// assert!(close.keeps(0) && !close.keeps(1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// The indexes kept.
    pub keep: std::sync::Arc<[u32]>,
    /// Why the others are cancelled.
    pub reason: CancelReason,
}

impl Close {
    /// Keeps `keep`, cancels the others for `reason`.
    ///
    /// ```
    /// use choicewise_proto::driver::{CancelReason, Close};
    /// assert!(!Close::new([], CancelReason::Closing).keeps(0));
    /// ```
    pub fn new(keep: impl Into<std::sync::Arc<[u32]>>, reason: CancelReason) -> Close {
        Close {
            keep: keep.into(),
            reason,
        }
    }

    /// Whether choice `index` is kept.
    ///
    /// ```
    /// use choicewise_proto::driver::{CancelReason, Close};
    /// assert!(Close::new([2u32], CancelReason::Closing).keeps(2));
    /// ```
    pub fn keeps(&self, index: u32) -> bool {
        self.keep.contains(&index)
    }
}

impl Closed {
    /// How the sub-streams ended, as their readers see it.
    pub fn result(&self) -> Result<(), Error> {
        match self {
            Closed::Ended { .. } | Closed::Cancelled(_) => Ok(()),
            Closed::Failed(e) => Err((**e).clone()),
        }
    }

    /// The error the choice's message reports, if any.
    pub fn error(&self) -> Option<Error> {
        match self {
            Closed::Ended { late_error } => late_error.as_deref().cloned(),
            Closed::Failed(e) => Some((**e).clone()),
            Closed::Cancelled(_) => None,
        }
    }
}

impl Phase {
    /// How the sub-streams ended, once they have.
    pub fn closed(&self) -> Option<&Closed> {
        match self {
            Phase::Open => None,
            Phase::Closed(c) | Phase::Settled(c) => Some(c),
        }
    }

    /// Whether the choice was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel_reason().is_some()
    }

    /// Why the choice was cancelled, if it was.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        match self.closed() {
            Some(Closed::Cancelled(reason)) => Some(*reason),
            _ => None,
        }
    }

    /// Whether the stream is over for the choice.
    pub fn is_settled(&self) -> bool {
        matches!(self, Phase::Settled(_))
    }
}

/// One choice's state: its merge and its [`Phase`]. Each method that changes it appends the
/// events it causes to `events` (the choice's log is the caller's) and the warnings for the
/// completion to `warnings`.
#[derive(Debug)]
pub struct ChoiceCore {
    index: u32,
    acc: ChoiceAccumulator,
    phase: Phase,
    /// Updates ignored because the choice had failed, and the line of the first.
    ignored: (u64, u64),
    /// The parsed updates of one batch, reused from batch to batch.
    updates: Vec<ChoiceUpdate>,
    /// The events of one update, reused.
    buf: Vec<ChoiceEvent>,
    /// The last raw update kept, whose repeats are not parsed again.
    repeats: Repeats,
    /// What is kept of the updates' log-probabilities.
    logprobs: LogprobsKept,
    /// The most bytes of raw updates it may take, and those taken so far.
    max_bytes: usize,
    bytes: usize,
    /// Its output so far against its bound of tokens, if it has one.
    tokens: Option<crate::TokenCount>,
    /// It was stopped at its bound of tokens.
    stopped_at_bound: bool,
}

/// Adds the texts of `events` to `count` (the choice's output against its bound, if it has
/// one; `acc` holds the output): `true` when the output passes it.
fn passes_bound(
    count: &mut Option<crate::TokenCount>,
    acc: &ChoiceAccumulator,
    events: &[ChoiceEvent],
) -> bool {
    let Some(count) = count else {
        return false;
    };
    for event in events {
        let text = match event {
            ChoiceEvent::Content(t) | ChoiceEvent::Refusal(t) | ChoiceEvent::Reasoning(t) => t,
            ChoiceEvent::FunctionCall(crate::FunctionCallEvent::Arguments { fragment, .. }) => {
                fragment
            }
            _ => continue,
        };
        count.add(text);
    }
    count.passes(|| acc.texts())
}

impl ChoiceCore {
    /// A new open choice.
    pub fn new(index: u32, max_tool_calls: usize) -> Self {
        ChoiceCore {
            index,
            acc: ChoiceAccumulator::new(index, max_tool_calls),
            phase: Phase::Open,
            ignored: (0, 0),
            updates: Vec::new(),
            buf: Vec::new(),
            repeats: Repeats::default(),
            logprobs: LogprobsKept::Raw,
            max_bytes: usize::MAX,
            bytes: 0,
            tokens: None,
            stopped_at_bound: false,
        }
    }

    /// Finishes the choice with `length` once its output passes `bound`'s tokens
    /// ([`StreamConfig::max_choice_tokens`](crate::StreamConfig::max_choice_tokens);
    /// `None`: no bound).
    pub fn max_tokens(mut self, bound: Option<crate::TokenBound>) -> Self {
        self.tokens = bound.map(crate::TokenCount::new);
        self
    }

    /// Whether the choice was stopped at its bound of tokens (it finished `length` there,
    /// and takes no more updates).
    pub fn stopped_at_bound(&self) -> bool {
        self.stopped_at_bound
    }

    /// Fails the choice alone once its raw updates pass `bytes` in all
    /// ([`StreamConfig::max_choice_bytes`](crate::StreamConfig::max_choice_bytes); `None`:
    /// no bound).
    pub fn max_bytes(mut self, bytes: Option<usize>) -> Self {
        self.max_bytes = bytes.unwrap_or(usize::MAX);
        self
    }

    /// Leaves out message data that arrives after the finish
    /// ([`StreamConfig::drop_after_finish`](crate::StreamConfig::drop_after_finish)).
    pub fn drop_after_finish(mut self, drop: bool) -> Self {
        self.acc.drop_after_finish(drop);
        self
    }

    /// Keeps of the updates' log-probabilities what `kept` says
    /// ([`StreamConfig::logprobs`](crate::StreamConfig::logprobs); their text by default).
    pub fn logprobs(mut self, kept: LogprobsKept) -> Self {
        self.logprobs = kept;
        self
    }

    /// A choice whose state was lost (its owner stopped) in `phase`, kept to take it through
    /// its last transitions ([`fail`](Self::fail), [`ignored`](Self::ignored),
    /// [`settle`](Self::settle)); its message is not known here.
    pub fn orphan(index: u32, phase: Phase) -> Self {
        ChoiceCore {
            phase,
            ..ChoiceCore::new(index, 0)
        }
    }

    /// Frees the buffers kept from batch to batch (the choice goes quiet).
    pub fn release_buffers(&mut self) {
        self.updates = Vec::new();
        self.buf = Vec::new();
    }

    /// The choice's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Where it is in its life.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The assembled choice and the error that ended it, if any.
    pub fn outcome(&self) -> (ChoiceOutput, Option<Error>) {
        (self.output(), self.phase.closed().and_then(Closed::error))
    }

    /// As [`output`](Self::output), its texts moved out rather than copied: for a settled
    /// choice, whose message is published for the last time (its texts are left empty).
    pub fn take_output(&mut self) -> ChoiceOutput {
        let mut output = self.acc.take_output();
        if self.phase.is_cancelled() {
            output.cancelled = true;
            output.finish_reason = None;
        }
        output
    }

    /// The choice as assembled so far; a cancelled one is flagged, without a finish reason.
    pub fn output(&self) -> ChoiceOutput {
        let mut output = self.acc.output();
        if self.phase.is_cancelled() {
            output.cancelled = true;
            output.finish_reason = None;
        }
        output
    }

    /// Whether the choice still merges updates.
    fn takes_updates(&self) -> bool {
        matches!(
            self.phase,
            Phase::Open | Phase::Closed(Closed::Ended { late_error: None })
        )
    }

    /// Parses and merges one batch of the choice's raw updates, in place (the batch is left
    /// empty, its buffers kept). A choice that no longer takes updates counts a failed
    /// choice's updates (for the [`WarningKind::IgnoredAfterFailure`] warning) and drops a
    /// cancelled one's, unparsed.
    pub fn apply_batch(
        &mut self,
        batch: &mut Batch,
        events: &mut Vec<ChoiceEvent>,
        warnings: &mut Vec<Warning>,
    ) {
        if !self.takes_updates() {
            if !self.phase.is_cancelled() {
                let line = batch.updates.first().map(|u| u.line);
                self.ignore(batch.updates.len() as u64, line);
            }
            batch.clear();
            return;
        }
        // The choice's bound: the updates within it are taken, the one that passes it fails
        // the choice, and those after it are dropped unparsed.
        let (fit, used) = batch.fitting(self.max_bytes.saturating_sub(self.bytes));
        self.bytes = self.bytes.saturating_add(used);
        let (dropped, over) = batch.cut_at(fit);
        let mut updates = std::mem::take(&mut self.updates);
        updates.clear();
        let decoded = decode_batch(
            self.index,
            self.logprobs,
            batch,
            &mut self.repeats,
            &mut updates,
        );
        self.apply(&mut updates, decoded, events, warnings);
        self.updates = updates;
        if let Some((line, offset)) = over {
            self.fail(Error::from(crate::ErrorDetail::ChoiceTooLarge {
                choice: self.index,
                limit: self.max_bytes,
                line,
                offset,
            }));
            self.ignore(dropped.saturating_sub(1), Some(line));
            batch.clear();
        }
    }

    /// Merges parsed updates; `decoded` is the batch's parse error, if any, after them.
    fn apply(
        &mut self,
        updates: &mut Vec<ChoiceUpdate>,
        decoded: Result<(), crate::decode::DecodeError>,
        events: &mut Vec<ChoiceEvent>,
        warnings: &mut Vec<Warning>,
    ) {
        let buf = &mut self.buf;
        for update in updates.drain(..) {
            let was_finished = self.acc.is_finished();
            buf.clear();
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
                let stop =
                    !self.acc.is_finished() && passes_bound(&mut self.tokens, &self.acc, buf);
                if stop {
                    self.acc.finish_with(Text::from("length"), buf);
                    self.stopped_at_bound = true;
                }
                events.append(buf);
                if self.acc.is_finished() {
                    self.phase = Phase::Closed(Closed::Ended { late_error: None });
                }
                if stop {
                    // Those after it are dropped with it: the choice takes no more.
                    break;
                }
            }
            if let Err(e) = result {
                self.fail(e);
                break;
            }
        }
        // Those after a failing update are dropped with it (the choice takes no more).
        updates.clear();
        if let Err(d) = decoded {
            self.fail(d.error);
            self.ignore(d.after, Some(d.after_line));
        }
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

    /// Counts updates the choice never got to see (routed to it after it failed).
    pub fn ignored(&mut self, updates: u64, line: Option<u64>) {
        self.ignore(updates, line);
    }

    /// Cancels the choice if it is open, for `reason`: appends [`ChoiceEvent::Cancelled`]
    /// (which ends the sub-streams) and drops its later updates. Returns whether it was open.
    pub fn cancel(&mut self, reason: CancelReason, events: &mut Vec<ChoiceEvent>) -> bool {
        if !matches!(self.phase, Phase::Open) {
            return false;
        }
        events.push(ChoiceEvent::Cancelled(reason));
        self.phase = Phase::Closed(Closed::Cancelled(reason));
        true
    }

    /// The choice (or what runs it) failed: ends the sub-streams with the error, or, if they
    /// had already ended at the finish, keeps it as the late error.
    pub fn fail(&mut self, error: Error) {
        match &mut self.phase {
            Phase::Open => self.phase = Phase::Closed(Closed::Failed(Box::new(error))),
            Phase::Closed(Closed::Ended { late_error }) => {
                late_error.get_or_insert(Box::new(error));
            }
            Phase::Closed(_) | Phase::Settled(_) => {}
        }
    }

    /// The stream is over for this choice (`outcome`: how it ended): closes the sub-streams
    /// if they are open, and settles the choice. Returns a warning when updates were ignored
    /// after the choice failed.
    pub fn settle(
        &mut self,
        outcome: Result<(), Error>,
        events: &mut Vec<ChoiceEvent>,
    ) -> Option<Warning> {
        let closed = match std::mem::replace(&mut self.phase, Phase::Open) {
            Phase::Settled(closed) => {
                self.phase = Phase::Settled(closed);
                return None;
            }
            Phase::Closed(closed) => closed,
            Phase::Open => match outcome {
                Ok(()) => {
                    // A finish kept open for late argument fragments takes effect at the end.
                    self.acc.end_of_stream(events);
                    Closed::Ended { late_error: None }
                }
                Err(e) => Closed::Failed(Box::new(e)),
            },
        };
        self.phase = Phase::Settled(closed);
        self.updates = Vec::new();
        self.buf = Vec::new();
        let (updates, line) = self.ignored;
        (updates > 0).then_some(Warning {
            choice: Some(self.index),
            line,
            kind: WarningKind::IgnoredAfterFailure { updates },
        })
    }
}

/// The completion from its facts, the stream's end and every choice's outcome (in order of
/// first appearance); the error reported is the stream's, else the first choice's.
pub fn assemble(
    meta: Meta,
    per_choice: &BTreeMap<u32, u64>,
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
    fill_choice_usage(per_choice, &mut outputs, None);
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

/// A choice's message rebuilt from its events alone (its text, its calls, its finish), for
/// whoever holds the log but not the choice's state: a snapshot while it streams, or what is
/// left of a choice whose owner stopped. A few things only the merge knows are not in the
/// events: a provider's own `stop_reason`, a call's `type`, updates after the finish, and
/// text fields sent only as empty strings.
pub fn output_from_events<'a>(
    index: u32,
    events: impl IntoIterator<Item = &'a ChoiceEvent>,
) -> ChoiceOutput {
    use crate::event::{CallKind, FunctionCallEvent};
    use crate::response::{FunctionCall, Message, ToolCall};
    fn push(slot: &mut Option<String>, text: &str) {
        slot.get_or_insert_with(String::new).push_str(text);
    }
    let mut message = Message::default();
    let mut output = ChoiceOutput::new(index, Message::default());
    let mut cancelled = false;
    let mut logprobs = Vec::new();
    for event in events {
        match event {
            ChoiceEvent::Role(role) => message.role = role.to_string(),
            ChoiceEvent::Content(t) => push(&mut message.content, t),
            ChoiceEvent::Refusal(t) => push(&mut message.refusal, t),
            ChoiceEvent::Reasoning(t) => push(&mut message.reasoning_content, t),
            ChoiceEvent::FunctionCall(call) => {
                let at = call.call();
                let slot = match at.kind {
                    CallKind::Function => message
                        .function_call
                        .get_or_insert_with(|| FunctionCall::new("", "")),
                    CallKind::Tool => {
                        let position = at.position as usize;
                        while message.tool_calls.len() <= position {
                            message.tool_calls.push(ToolCall::function("", "", ""));
                        }
                        let tool = &mut message.tool_calls[position];
                        match call {
                            FunctionCallEvent::Started { id: Some(id), .. }
                            | FunctionCallEvent::Finished { id: Some(id), .. } => {
                                tool.id = id.to_string()
                            }
                            _ => {}
                        }
                        &mut tool.function
                    }
                };
                match call {
                    FunctionCallEvent::Started {
                        name: Some(name), ..
                    } => slot.name = name.to_string(),
                    FunctionCallEvent::Arguments { fragment, .. } => {
                        slot.arguments.push_str(fragment)
                    }
                    FunctionCallEvent::Finished {
                        name, arguments, ..
                    } => {
                        if let Some(name) = name {
                            slot.name = name.to_string();
                        }
                        // Exactly its size: the buffer its fragments grew (up to twice the
                        // text) is freed.
                        slot.arguments = arguments.to_string();
                    }
                    _ => {}
                }
            }
            ChoiceEvent::Logprobs(lp) => logprobs.push(lp),
            ChoiceEvent::ContentFilter(cf) => output.content_filter_results = Some((**cf).clone()),
            ChoiceEvent::Warning(_) | ChoiceEvent::TokenConfidence(_) => {}
            ChoiceEvent::Finished(reason) => output.finish_reason = Some(reason.to_string()),
            ChoiceEvent::Cancelled(_) => cancelled = true,
        }
    }
    output.message = message;
    output.logprobs = crate::Logprobs::merged(logprobs);
    if cancelled {
        output.cancelled = true;
        output.finish_reason = None;
    }
    output
}

/// Gives each choice its [`ChoiceUsage`]: the provider's figure for that choice when the
/// stream carried one (`reported`, see `ReportedUsage::per_choice`), else the estimate's
/// count when `usage` is an estimate. A reported total shared by several choices (OpenAI with
/// n > 1) is no choice's figure: those choices get `None` here, so that `collect()` never
/// loads a BPE table for a completion whose usage was reported
/// (`Choice::usage` estimates on demand).
pub fn fill_choice_usage(
    reported: &BTreeMap<u32, u64>,
    choices: &mut [ChoiceOutput],
    usage: Option<&Usage>,
) {
    for c in choices.iter_mut() {
        let estimated = usage
            .and_then(|u| u.estimate.as_ref())
            .and_then(|e| e.choices.get(&c.index));
        c.usage = match (reported.get(&c.index), estimated) {
            (Some(&n), _) => Some(ChoiceUsage {
                completion_tokens: n,
                source: UsageSource::Reported,
            }),
            (None, Some(&n)) => Some(ChoiceUsage {
                completion_tokens: n,
                source: UsageSource::Estimated,
            }),
            (None, None) => None,
        };
    }
}
