//! Merging one choice's updates into its message: pure, synchronous, and the place where the
//! providers' quirks are absorbed.
//!
//! The rules, in the order an update is applied (text before finish):
//! - strings (`content`, `refusal`, reasoning, `arguments`) append; an absent key or `null`
//!   changes nothing; `Some("")` is kept apart from `None`;
//! - `role`, tool-call `id`, `type` and `function.name` are set once: an equal repeat is ignored
//!   and a different one is reported as a warning, the first value kept;
//! - tool calls merge by their own `index` within the choice; a fragment whose non-empty `id`
//!   differs from its slot's and that carries a `function.name` opens a new call (servers that
//!   send every parallel call with index 0); without `index`, an unknown `id` opens a new call
//!   and no `id` continues the latest call;
//! - opening a call finishes the calls opened before it; the choice's `finish_reason` finishes
//!   every open call and then the choice, except a call whose arguments are still an
//!   incomplete JSON value (some servers send the finish before the last argument fragment):
//!   the finish then waits until the arguments complete or the stream ends (see
//!   [`ChoiceAccumulator::end_of_stream`]), so the call's `Finished` carries the whole
//!   arguments; a fragment that arrives meanwhile is reported as
//!   [`WarningKind::FinishBeforeArguments`];
//! - updates after the finish are applied and reported as [`WarningKind::DataAfterFinish`]
//!   (annotation-only updates, such as Azure's late content filter results, are not); with
//!   [`StreamConfig::drop_after_finish`](crate::StreamConfig::drop_after_finish), their
//!   message data is left out instead, reported as [`WarningKind::DataAfterFinishDropped`];
//! - the first finish wins, whatever the dialect: a second `finish_reason` (a Chat chunk's, a
//!   second Anthropic `message_delta` stop reason, a second Responses `response.completed`)
//!   is left out and reported as [`WarningKind::SecondFinish`], the provider's own stop
//!   reason kept with the first.

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::error::{Error, ErrorDetail};
use crate::event::{CallKind, CallRef, ChoiceEvent, FunctionCallEvent, Text, Warning, WarningKind};
use crate::logprobs::Logprobs;
use crate::response::{ChoiceOutput, FunctionCall, Message, ToolCall};

mod arguments;

#[cfg(test)]
use arguments::INCREMENTAL_CHECK_BYTES;
use arguments::parse_final;

/// One choice's share of one chunk, detached from the input so it can travel to the choice's
/// actor. Empty ids, names, types and roles are already dropped; `finish_reason` `""` is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ChoiceUpdate {
    pub line: u64,
    /// The byte offset of the update's event in the stream.
    pub offset: u64,
    pub role: Option<Text>,
    pub content: Option<Text>,
    pub refusal: Option<Text>,
    pub reasoning: Option<Text>,
    pub function_call: Option<Box<CallFragment>>,
    pub tool_calls: Vec<ToolFragment>,
    /// Tool calls (by their wire index) whose arguments the provider says are complete: they
    /// finish now (the typed dialects say so; Chat Completions never does).
    pub calls_done: Vec<u32>,
    pub finish_reason: Option<Text>,
    /// The provider's own stop reason, when `finish_reason` was mapped from another dialect's
    /// (Anthropic's `end_turn`, a Responses `incomplete` reason).
    pub stop_reason: Option<Text>,
    /// Log-probabilities, as the stream keeps them (`None` for `null`).
    pub logprobs: Option<UpdateLogprobs>,
    // Rare fields are boxed: updates are moved several times on the hot path.
    pub content_filter_results: Option<Box<Value>>,
    /// A choicewise gateway's `choicewise.error` on this choice: why it failed upstream of
    /// the gateway (with `finish_reason: "error"`).
    pub gateway_error: Option<Box<str>>,
}

impl ChoiceUpdate {
    /// Whether the update carries message data (not only annotations).
    fn has_data(&self) -> bool {
        self.role.is_some()
            || self.content.as_deref().is_some_and(|s| !s.is_empty())
            || self.refusal.as_deref().is_some_and(|s| !s.is_empty())
            || self.reasoning.as_deref().is_some_and(|s| !s.is_empty())
            || self.function_call.is_some()
            || !self.tool_calls.is_empty()
            || self.logprobs.is_some()
    }

    /// Leaves out the update's message data ([`has_data`](Self::has_data)), keeping its
    /// annotations and its finish.
    fn drop_data(&mut self) {
        self.role = None;
        self.content = None;
        self.refusal = None;
        self.reasoning = None;
        self.function_call = None;
        self.tool_calls.clear();
        self.logprobs = None;
    }
}

/// An update's log-probabilities as the stream keeps them ([`LogprobsKept`](crate::LogprobsKept)).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum UpdateLogprobs {
    /// The JSON text.
    Raw(Logprobs),
    /// Each token's confidence, in order (tokens without one left out).
    Confidence(Box<[f64]>),
}

/// A fragment of a function call (legacy `function_call`, or the `function` of a tool call).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CallFragment {
    pub name: Option<Text>,
    pub arguments: Option<Text>,
    /// The arguments arrived as a JSON value and were serialised.
    pub arguments_not_string: bool,
}

/// A fragment of one tool call.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ToolFragment {
    pub index: Option<u32>,
    pub id: Option<Text>,
    pub kind: Option<Text>,
    pub function: CallFragment,
}

/// A shared empty string, so that the frequent `"content": ""` costs no allocation.
pub(crate) fn empty_text() -> Text {
    static EMPTY: OnceLock<Text> = OnceLock::new();
    EMPTY.get_or_init(|| Arc::from("")).clone()
}

/// Text from a wire string, sharing the empty string.
pub(crate) fn text(s: &str) -> Text {
    if s.is_empty() {
        empty_text()
    } else {
        Arc::from(s)
    }
}

#[derive(Debug, Clone)]
struct CallState {
    wire_index: Option<u32>,
    id: Option<Text>,
    kind: Option<Text>,
    name: Option<Text>,
    /// The arguments while they grow; moved into `done` when the call finishes.
    arguments: String,
    /// The finished call's arguments, shared with its event: kept once, and the buffer the
    /// fragments grew (up to twice the text) freed.
    done: Option<Text>,
    finished: bool,
}

impl CallState {
    fn new(wire_index: Option<u32>) -> Self {
        CallState {
            wire_index,
            id: None,
            kind: None,
            name: None,
            arguments: String::new(),
            done: None,
            finished: false,
        }
    }

    /// The arguments so far.
    fn text(&self) -> &str {
        self.done.as_deref().unwrap_or(&self.arguments)
    }

    /// Appends a fragment (to a finished call's text too: it grows again).
    fn push(&mut self, fragment: &str) {
        if let Some(done) = self.done.take() {
            self.arguments = done.to_string();
        }
        self.arguments.push_str(fragment);
    }

    fn finished_event(&mut self, call: CallRef) -> ChoiceEvent {
        self.finished = true;
        let arguments: Text = match self.done.take() {
            Some(done) => done,
            None => Arc::from(std::mem::take(&mut self.arguments)),
        };
        self.done = Some(arguments.clone());
        let parsed = parse_final(&arguments);
        ChoiceEvent::FunctionCall(FunctionCallEvent::Finished {
            call,
            id: self.id.clone(),
            name: self.name.clone(),
            arguments,
            value: parsed.value,
            repaired: parsed.repaired,
        })
    }
}

/// The state of one choice: everything merged so far.
#[derive(Debug, Clone)]
pub(crate) struct ChoiceAccumulator {
    index: u32,
    max_tool_calls: usize,
    /// Message data after the finish is left out (reported as dropped), not applied.
    drop_after_finish: bool,
    role: Option<Text>,
    content: Option<String>,
    refusal: Option<String>,
    reasoning: Option<String>,
    /// Legacy and rare: boxed, so that every choice does not carry its size.
    function_call: Option<Box<CallState>>,
    tool_calls: Vec<CallState>,
    finish: Option<Text>,
    /// A `finish_reason` that arrived while a call's arguments were an incomplete JSON value:
    /// the finish waits for them (or for the end of the stream).
    pending_finish: Option<Text>,
    // Rare: boxed together, so that every choice does not carry their size.
    rare: Option<Box<Rare>>,
}

/// What few choices carry.
#[derive(Debug, Clone, Default)]
struct Rare {
    /// Every update's log-probabilities (shared with their events), merged when asked.
    logprobs: Vec<Logprobs>,
    content_filter_results: Option<Value>,
    stop_reason: Option<Text>,
}

/// Whether arguments are an incomplete JSON value: a valid beginning that ends too soon.
/// Empty arguments are not (a call without arguments).
fn incomplete_json(arguments: &str) -> bool {
    !arguments.trim().is_empty()
        && serde_json::from_str::<serde::de::IgnoredAny>(arguments).is_err_and(|e| e.is_eof())
}

impl ChoiceAccumulator {
    pub fn new(index: u32, max_tool_calls: usize) -> Self {
        ChoiceAccumulator {
            index,
            max_tool_calls,
            drop_after_finish: false,
            role: None,
            content: None,
            refusal: None,
            reasoning: None,
            function_call: None,
            tool_calls: Vec::new(),
            finish: None,
            pending_finish: None,
            rare: None,
        }
    }

    /// Leaves out message data that arrives after the finish (reported as
    /// [`WarningKind::DataAfterFinishDropped`]) instead of applying it.
    pub fn drop_after_finish(&mut self, drop: bool) {
        self.drop_after_finish = drop;
    }

    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    /// Applies one update, appending the events it causes to `out`.
    ///
    /// On error (too many tool calls), the parts of the update applied before it stay applied
    /// and their events are in `out`.
    pub fn apply(&mut self, mut u: ChoiceUpdate, out: &mut Vec<ChoiceEvent>) -> Result<(), Error> {
        let line = u.line;
        if self.finish.is_some() && u.has_data() {
            if self.drop_after_finish {
                out.push(self.warning(line, WarningKind::DataAfterFinishDropped));
                u.drop_data();
            } else {
                out.push(self.warning(line, WarningKind::DataAfterFinish));
            }
        }
        if let Some(role) = u.role {
            match &self.role {
                None => {
                    self.role = Some(role.clone());
                    out.push(ChoiceEvent::Role(role));
                }
                Some(kept) if **kept == *role => {}
                Some(kept) => {
                    let kind = conflict("role", kept, &role);
                    out.push(self.warning(line, kind));
                }
            }
        }
        if let Some(t) = u.reasoning {
            append(&mut self.reasoning, &t);
            if !t.is_empty() {
                out.push(ChoiceEvent::Reasoning(t));
            }
        }
        if let Some(t) = u.content {
            append(&mut self.content, &t);
            if !t.is_empty() {
                out.push(ChoiceEvent::Content(t));
            }
        }
        if let Some(t) = u.refusal {
            append(&mut self.refusal, &t);
            if !t.is_empty() {
                out.push(ChoiceEvent::Refusal(t));
            }
        }
        let waiting = self.pending_finish.is_some();
        if let Some(f) = u.function_call {
            self.function_fragment(*f, line, out);
        }
        for f in u.tool_calls {
            self.tool_fragment(f, (line, u.offset), out)?;
        }
        for wire in u.calls_done {
            let found = self
                .tool_calls
                .iter()
                .rposition(|c| c.wire_index == Some(wire));
            if let Some(p) = found.filter(|&p| !self.tool_calls[p].finished) {
                out.push(self.tool_calls[p].finished_event(CallRef {
                    kind: CallKind::Tool,
                    position: p as u32,
                }));
            }
        }
        if waiting {
            self.complete_pending_finish(out);
        }
        match u.logprobs {
            Some(UpdateLogprobs::Raw(lp)) => {
                self.rare.get_or_insert_default().logprobs.push(lp.clone());
                out.push(ChoiceEvent::Logprobs(lp));
            }
            Some(UpdateLogprobs::Confidence(confidences)) => {
                out.extend(confidences.iter().map(|&c| ChoiceEvent::TokenConfidence(c)));
            }
            None => {}
        }
        if let Some(cf) = u.content_filter_results {
            self.rare.get_or_insert_default().content_filter_results = Some((*cf).clone());
            out.push(ChoiceEvent::ContentFilter(Arc::new(*cf)));
        }
        // The provider's own reason goes with the finish kept: the first.
        if let Some(reason) = u.stop_reason
            && self.finish.is_none()
            && self.pending_finish.is_none()
        {
            self.rare.get_or_insert_default().stop_reason = Some(reason);
        }
        if let (Some("error"), Some(why)) = (u.finish_reason.as_deref(), u.gateway_error) {
            // A gateway that relayed the choice says it failed, and why: the choice failed,
            // as it would have read from the upstream itself; what came before it stays.
            return Err(Error::from(crate::error::ErrorDetail::Upstream(Arc::new(
                crate::error::UpstreamError {
                    message: why.to_string(),
                    kind: Some("gateway_choice_error".to_string()),
                    code: None,
                    line,
                    raw: serde_json::json!({"choicewise": {"error": &*why}}),
                },
            ))));
        }
        if let Some(reason) = u.finish_reason {
            match self.finish.as_ref().or(self.pending_finish.as_ref()) {
                None => {
                    self.pending_finish = Some(reason);
                    self.complete_pending_finish(out);
                }
                Some(kept) => {
                    let kind = WarningKind::SecondFinish {
                        kept: preview(kept),
                        ignored: preview(&reason),
                    };
                    out.push(self.warning(line, kind));
                }
            }
        }
        Ok(())
    }

    /// Finishes the calls whose arguments are complete; once no call waits for more, the
    /// pending finish becomes the choice's finish.
    fn complete_pending_finish(&mut self, out: &mut Vec<ChoiceEvent>) {
        if self.pending_finish.is_none() {
            return;
        }
        // A custom tool's input is free text, never JSON to wait for.
        let waits = |s: &CallState| {
            !s.finished && s.kind.as_deref() != Some("custom") && incomplete_json(s.text())
        };
        if let Some(state) = self
            .function_call
            .as_mut()
            .filter(|s| !s.finished && !waits(s))
        {
            out.push(state.finished_event(CallRef {
                kind: CallKind::Function,
                position: 0,
            }));
        }
        for (p, state) in self.tool_calls.iter_mut().enumerate() {
            if !state.finished && !waits(state) {
                out.push(state.finished_event(CallRef {
                    kind: CallKind::Tool,
                    position: p as u32,
                }));
            }
        }
        let waiting =
            self.function_call.as_deref().is_some_and(waits) || self.tool_calls.iter().any(waits);
        if !waiting {
            self.finish_now(out);
        }
    }

    /// The pending finish, now: every open call finishes with the arguments it has, then the
    /// choice.
    fn finish_now(&mut self, out: &mut Vec<ChoiceEvent>) {
        if let Some(reason) = self.pending_finish.take() {
            self.finish_calls(out);
            self.finish = Some(reason.clone());
            out.push(ChoiceEvent::Finished(reason));
        }
    }

    /// The choice finished here with `reason` (the gateway's own, `length` at a bound of
    /// tokens), unless it finished already: open calls finish with the arguments they have.
    pub fn finish_with(&mut self, reason: Text, out: &mut Vec<ChoiceEvent>) {
        if self.finish.is_none() {
            self.pending_finish = Some(reason);
            self.finish_now(out);
        }
    }

    /// Every text the choice has so far, in one: its content, refusal, reasoning and its
    /// calls' arguments.
    pub fn texts(&self) -> String {
        let calls = (self.function_call.as_deref().into_iter()).chain(&self.tool_calls);
        [&self.content, &self.refusal, &self.reasoning]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .chain(calls.map(|c| c.text()))
            .collect()
    }

    /// The stream ended well: a finish still waiting for argument fragments takes effect, the
    /// waiting calls finishing with the arguments they have.
    pub fn end_of_stream(&mut self, out: &mut Vec<ChoiceEvent>) {
        self.finish_now(out);
    }

    fn warning(&self, line: u64, kind: WarningKind) -> ChoiceEvent {
        ChoiceEvent::Warning(Warning {
            choice: Some(self.index),
            line,
            kind,
        })
    }

    fn function_fragment(&mut self, f: CallFragment, line: u64, out: &mut Vec<ChoiceEvent>) {
        let call = CallRef {
            kind: CallKind::Function,
            position: 0,
        };
        let index = self.index;
        let choice_finished = self.finish.is_some();
        let waiting = self.pending_finish.is_some();
        let state = self.function_call.get_or_insert_with(|| {
            out.push(ChoiceEvent::FunctionCall(FunctionCallEvent::Started {
                call,
                id: None,
                name: f.name.clone(),
                custom: false,
            }));
            let mut state = CallState::new(None);
            state.name = f.name.clone();
            Box::new(state)
        });
        let mut warnings = Vec::new();
        set_once(
            &mut state.name,
            f.name.clone(),
            || "function_call.name".to_string(),
            &mut warnings,
        );
        let late = lateness(state, choice_finished, waiting);
        append_arguments(state, call, &f, late, &mut warnings, out);
        for kind in warnings {
            out.push(ChoiceEvent::Warning(Warning {
                choice: Some(index),
                line,
                kind,
            }));
        }
    }

    fn tool_fragment(
        &mut self,
        f: ToolFragment,
        (line, offset): (u64, u64),
        out: &mut Vec<ChoiceEvent>,
    ) -> Result<(), Error> {
        let choice_finished = self.finish.is_some();
        let waiting = self.pending_finish.is_some();
        let position = self.locate_call(&f, (line, offset), out)?;
        let call = CallRef {
            kind: CallKind::Tool,
            position: position as u32,
        };
        let index = self.index;
        let state = &mut self.tool_calls[position];
        let mut warnings = Vec::new();
        let field = |name: &'static str| move || format!("tool_calls[{position}].{name}");
        set_once(&mut state.id, f.id, field("id"), &mut warnings);
        set_once(&mut state.kind, f.kind, field("type"), &mut warnings);
        set_once(
            &mut state.name,
            f.function.name.clone(),
            field("function.name"),
            &mut warnings,
        );
        let late = lateness(state, choice_finished, waiting);
        append_arguments(state, call, &f.function, late, &mut warnings, out);
        for kind in warnings {
            out.push(ChoiceEvent::Warning(Warning {
                choice: Some(index),
                line,
                kind,
            }));
        }
        Ok(())
    }

    /// Finds the call a fragment continues, or opens a new one (finishing the earlier calls).
    fn locate_call(
        &mut self,
        f: &ToolFragment,
        (line, offset): (u64, u64),
        out: &mut Vec<ChoiceEvent>,
    ) -> Result<usize, Error> {
        let existing = match f.index {
            Some(i) => self
                .tool_calls
                .iter()
                .rposition(|c| c.wire_index == Some(i))
                .filter(|&p| {
                    let slot = &self.tool_calls[p];
                    let opens_new = f.function.name.is_some()
                        && matches!((&f.id, &slot.id), (Some(new), Some(old)) if new != old);
                    !opens_new
                }),
            None => match &f.id {
                Some(id) => self
                    .tool_calls
                    .iter()
                    .rposition(|c| c.id.as_deref() == Some(&**id)),
                None => self.tool_calls.len().checked_sub(1),
            },
        };
        if let Some(p) = existing {
            return Ok(p);
        }
        if self.tool_calls.len() >= self.max_tool_calls {
            return Err(Error::from(ErrorDetail::InvalidToolCall {
                choice: self.index,
                what: format!("more than {} tool calls", self.max_tool_calls),
                line,
                offset,
            }));
        }
        for (p, state) in self.tool_calls.iter_mut().enumerate() {
            if !state.finished {
                out.push(state.finished_event(CallRef {
                    kind: CallKind::Tool,
                    position: p as u32,
                }));
            }
        }
        let position = self.tool_calls.len();
        let mut state = CallState::new(f.index);
        state.id = f.id.clone();
        state.kind = f.kind.clone();
        state.name = f.function.name.clone();
        out.push(ChoiceEvent::FunctionCall(FunctionCallEvent::Started {
            call: CallRef {
                kind: CallKind::Tool,
                position: position as u32,
            },
            id: f.id.clone(),
            name: f.function.name.clone(),
            custom: f.kind.as_deref() == Some("custom"),
        }));
        self.tool_calls.push(state);
        Ok(position)
    }

    fn finish_calls(&mut self, out: &mut Vec<ChoiceEvent>) {
        if let Some(state) = self.function_call.as_mut().filter(|s| !s.finished) {
            out.push(state.finished_event(CallRef {
                kind: CallKind::Function,
                position: 0,
            }));
        }
        for (p, state) in self.tool_calls.iter_mut().enumerate() {
            if !state.finished {
                out.push(state.finished_event(CallRef {
                    kind: CallKind::Tool,
                    position: p as u32,
                }));
            }
        }
    }

    /// The choice as assembled so far.
    /// The message, its texts moved out rather than copied: for a choice that takes no more
    /// updates (its texts are left empty).
    pub fn take_output(&mut self) -> ChoiceOutput {
        let (content, refusal, reasoning) = (
            self.content.take(),
            self.refusal.take(),
            self.reasoning.take(),
        );
        let mut output = self.output();
        let message = &mut output.message;
        (message.content, message.refusal, message.reasoning_content) =
            (content, refusal, reasoning);
        output
    }

    pub fn output(&self) -> ChoiceOutput {
        let call = |c: &CallState| FunctionCall {
            name: c.name.as_deref().unwrap_or_default().to_string(),
            arguments: c.text().to_string(),
        };
        ChoiceOutput {
            index: self.index,
            message: Message {
                role: self.role.as_deref().unwrap_or("assistant").to_string(),
                content: self.content.clone(),
                refusal: self.refusal.clone(),
                reasoning_content: self.reasoning.clone(),
                tool_calls: self
                    .tool_calls
                    .iter()
                    .map(|c| ToolCall {
                        id: c.id.as_deref().unwrap_or_default().to_string(),
                        kind: c.kind.as_deref().unwrap_or("function").to_string(),
                        function: call(c),
                    })
                    .collect(),
                function_call: self.function_call.as_deref().map(call),
            },
            finish_reason: self
                .finish
                .as_deref()
                .or(self.pending_finish.as_deref())
                .map(str::to_string),
            logprobs: self
                .rare
                .as_ref()
                .and_then(|r| Logprobs::merged(&r.logprobs)),
            content_filter_results: self
                .rare
                .as_ref()
                .and_then(|r| r.content_filter_results.clone()),
            stop_reason: self
                .rare
                .as_ref()
                .and_then(|r| r.stop_reason.as_deref().map(str::to_string)),
            usage: None,
            source: None,
            cancelled: false,
        }
    }
}

fn append(slot: &mut Option<String>, t: &str) {
    match slot {
        Some(s) => s.push_str(t),
        None => *slot = Some(t.to_string()),
    }
}

fn conflict(field: &str, kept: &str, ignored: &str) -> WarningKind {
    WarningKind::ConflictingValue {
        field: field.to_string(),
        kept: preview(kept),
        ignored: preview(ignored),
    }
}

/// How much of a value a warning quotes: warnings must not grow memory with (repeats x value
/// size), so a long value is cut, saying how long it was.
const PREVIEW_CHARS: usize = 80;

pub(crate) fn preview(value: &str) -> String {
    match value.char_indices().nth(PREVIEW_CHARS) {
        None => value.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes)", &value[..cut], value.len()),
    }
}

/// Sets a set-once field; `field` names it, and is only called for a conflict (this runs
/// for every fragment).
fn set_once(
    slot: &mut Option<Text>,
    value: Option<Text>,
    field: impl FnOnce() -> String,
    warnings: &mut Vec<WarningKind>,
) {
    let Some(value) = value else { return };
    match slot {
        None => *slot = Some(value),
        Some(kept) if **kept == *value => {}
        Some(kept) => warnings.push(conflict(&field(), kept, &value)),
    }
}

/// Why an argument fragment is late, if it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Late {
    No,
    /// The call had ended (a later call started) while the choice went on.
    AfterCallEnd,
    /// The choice's finish arrived before this fragment; the call was kept open for it.
    AfterFinish,
}

fn lateness(state: &CallState, choice_finished: bool, waiting: bool) -> Late {
    if waiting && !state.finished {
        Late::AfterFinish
    } else if state.finished && !choice_finished {
        Late::AfterCallEnd
    } else {
        Late::No
    }
}

fn append_arguments(
    state: &mut CallState,
    call: CallRef,
    f: &CallFragment,
    late: Late,
    warnings: &mut Vec<WarningKind>,
    out: &mut Vec<ChoiceEvent>,
) {
    if f.arguments_not_string {
        warnings.push(WarningKind::ArgumentsNotString);
    }
    let Some(fragment) = f.arguments.as_ref().filter(|a| !a.is_empty()) else {
        return;
    };
    state.push(fragment);
    match late {
        Late::No => {}
        Late::AfterCallEnd => warnings.push(WarningKind::FragmentAfterCallEnd { call }),
        Late::AfterFinish => warnings.push(WarningKind::FinishBeforeArguments { call }),
    }
    out.push(ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments {
        call,
        fragment: fragment.clone(),
    }));
}

#[cfg(test)]
mod tests;
