//! The reader's share of the work: framing, the chunk envelope, and splitting each chunk's
//! `choices` into every choice's raw JSON. Pure and synchronous.
//!
//! Only what must be serial happens here. A chunk is read as an *envelope*: its id, model,
//! timestamps, usage, `error` and Azure's prompt filter results are parsed, but each element
//! of `choices` is only scanned: its `index` is read, its other fields (`delta`,
//! `finish_reason`, `logprobs`, `content_filter_results`) are kept as raw JSON text, and the
//! text is copied into that choice's [`Batch`]. The typed parse of a delta, which is most of
//! the work, happens in the choice's own actor (`decode`), on any core, so that a malformed
//! delta fails its choice only.
//!
//! Stream-level errors stay here: framing errors, an event that is not a JSON object, an
//! invalid or excess choice index, an `error` payload, and truncation.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::{ControlFlow, Range};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use choicewise_sse::{DataLines, Framer};

use crate::config::StreamConfig;
use crate::dialect::Dialect;
use crate::error::{Error, ErrorDetail, UpstreamError};
use crate::event::{Warning, WarningKind};
use crate::scan::{Head, Scanned, scan};
use crate::upstream::{Reader, dialect_of, dialect_of_record};
use crate::wire::ChatCompletionChunk;
use detect::dialect_from;
use envelope::{Created, Envelope, Facts, RawChoices, raw_value, upstream_error};
use event_stream::EventStream;

/// What one step of the input produced.
#[derive(Debug)]
pub enum Step {
    /// More may come.
    Continue,
    /// The stream is over: cleanly, or with the error that ended it.
    End(Result<(), Error>),
}

/// Frames the input, reads each chunk's envelope, and splits its choices into per-choice
/// batches; gathers the completion-level facts.
#[derive(Debug)]
pub struct Splitter {
    framer: Framer,
    /// The framer of an AWS event stream (Bedrock's), in place of `framer`: the API's
    /// framing when the stream's API is given, else recognised by the stream's first byte.
    event_stream: Option<Box<EventStream>>,
    /// The largest event accepted, in bytes (an event-stream message's too).
    max_event_size: usize,
    /// Bytes fed so far.
    offset: u64,
    /// The warning about events without blank lines was given.
    warned_unterminated: bool,
    /// The scan's vector of choices, reused from chunk to chunk.
    scanned: Vec<crate::scan::ScannedChoice>,
    /// The head of the last chunk scanned, which the next chunk most likely repeats.
    head: Head,
    /// The stream's dialect (`None` until its first event says).
    dialect: Option<Dialect>,
    /// The state of a typed-dialect stream (boxed: most streams are Chat Completions).
    typed: Option<Box<Reader>>,
    /// The request's custom tools, for a typed-dialect stream's decoder.
    custom_tools: std::sync::Arc<[String]>,
    max_choices: usize,
    /// Choice index to slot, for small indexes (the usual case) ...
    small: Vec<u32>,
    /// ... and for the others.
    large: HashMap<u32, usize>,
    /// The choices seen, in order of first appearance, each with its updates not yet taken.
    pub(crate) slots: Vec<Slot>,
    /// The slots whose first finish reason came since the last [`Splitter::take_finishes`],
    /// in the order those finishes came in the stream.
    finishes: Vec<usize>,
    /// The completion's facts so far.
    pub(crate) meta: Meta,
    /// Warnings not yet published.
    pub(crate) warnings: Vec<Warning>,
}

const SMALL_INDEXES: usize = 256;
const NO_SLOT: u32 = u32::MAX;

impl Splitter {
    /// A splitter with these limits, framing and dialect.
    pub fn new(config: &StreamConfig) -> Self {
        Splitter {
            framer: Framer::with_max_event_size(config.max_event_size).strict(config.strict_sse),
            event_stream: None,
            max_event_size: config.max_event_size,
            offset: 0,
            warned_unterminated: false,
            scanned: Vec::new(),
            head: Head::default(),
            dialect: config.dialect,
            typed: None,
            custom_tools: config.custom_tools.clone(),
            max_choices: config.max_choices,
            small: Vec::new(),
            large: HashMap::new(),
            slots: Vec::new(),
            finishes: Vec::new(),
            meta: Meta::default(),
            warnings: Vec::new(),
        }
    }

    /// Bytes fed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How many choices have appeared. A choice's slot is its place in the order of first
    /// appearance: `0..choice_count()`.
    pub fn choice_count(&self) -> usize {
        self.slots.len()
    }

    /// The index (as the stream numbers it) of the choice in `slot`.
    pub fn choice_index(&self, slot: usize) -> u32 {
        self.slots[slot].index
    }

    /// Whether the stream finished the choice in `slot` (a finish reason came for it).
    pub fn choice_finished(&self, slot: usize) -> bool {
        self.slots[slot].finished
    }

    /// The updates split off for the choice in `slot` and not taken yet.
    pub fn pending(&self, slot: usize) -> &Batch {
        &self.slots[slot].batch
    }

    /// Bytes of updates split off and not taken yet, every choice's.
    pub fn pending_bytes(&self) -> usize {
        self.slots.iter().map(|s| s.batch.text_len()).sum()
    }

    /// Takes the updates of the choice in `slot`, leaving `refill` (an emptied batch, to
    /// reuse its buffers) in their place.
    pub fn take_pending(&mut self, slot: usize, refill: Batch) -> Batch {
        std::mem::replace(&mut self.slots[slot].batch, refill)
    }

    /// The completion's facts so far.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// Whether the stream speaks a typed dialect, whose events the reader decodes itself
    /// (Responses, Anthropic, Gemini).
    pub(crate) fn typed_dialect(&self) -> bool {
        self.dialect.is_some_and(Dialect::has_reader)
    }

    /// Takes the completion's facts (at the stream's end).
    pub fn take_meta(&mut self) -> Meta {
        std::mem::take(&mut self.meta)
    }

    /// The stream finished the choice in `slot` (a finish reason came for it): its place in
    /// the finish order is taken the first time.
    pub(crate) fn finish(&mut self, slot: usize) {
        if !self.slots[slot].finished {
            self.slots[slot].finished = true;
            self.finishes.push(slot);
        }
    }

    /// The slots whose choices the stream finished since the last call, in the order their
    /// finish reasons came in the stream (each slot once, at its first finish reason): the
    /// order a pick's "first finished" and a vote's ties follow, whatever order the choices'
    /// actors then run in.
    pub fn take_finishes(&mut self) -> std::vec::Drain<'_, usize> {
        self.finishes.drain(..)
    }

    /// Whether warnings wait to be taken.
    pub fn has_warnings(&self) -> bool {
        !self.warnings.is_empty()
    }

    /// Moves the warnings not taken yet to the end of `to`.
    pub fn take_warnings(&mut self, to: &mut Vec<Warning>) {
        to.append(&mut self.warnings);
    }

    /// The choices that have not finished, in index order.
    pub fn unfinished(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .slots
            .iter()
            .filter(|s| !s.finished)
            .map(|s| s.index)
            .collect();
        v.sort_unstable();
        v
    }

    /// Splits every event `bytes` completes.
    pub fn feed(&mut self, bytes: &[u8]) -> Step {
        if self.offset == 0 && self.event_stream.is_none() && !bytes.is_empty() {
            self.choose_framing(bytes[0]);
        }
        if self.event_stream.is_some() {
            return self.feed_event_stream(bytes);
        }
        let mut stop: Option<Result<(), Error>> = None;
        // The framer borrows itself while it calls back; the rest of the splitter is free.
        let mut framer = std::mem::take(&mut self.framer);
        let fed = framer.feed(bytes, |event| {
            let read = self.event(
                event.event,
                event.data,
                event.line,
                event.offset,
                event.data_lines,
            );
            go_on(read, &mut stop)
        });
        self.framer = framer;
        self.offset += bytes.len() as u64;
        // Between reads nothing of the scratch space is needed: a stream that goes quiet
        // (most completions, most of the time) holds none of it. One allocation per read
        // brings it back.
        if self.framer.release_idle_buffers() {
            self.scanned = Vec::new();
        }
        if let Some(line) = self.framer.first_unterminated_line() {
            self.warn_unterminated(line);
        }
        match fed {
            Err(e) => Step::End(Err(e.into())),
            Ok(choicewise_sse::Feed::Consumed) => Step::Continue,
            Ok(choicewise_sse::Feed::Stopped { consumed }) => {
                let outcome = stop.unwrap_or(Ok(()));
                if outcome.is_ok() {
                    let rest = &bytes[consumed.min(bytes.len())..];
                    if rest.iter().any(|b| !b.is_ascii_whitespace()) {
                        self.warnings.push(Warning {
                            choice: None,
                            line: self.framer.position().line,
                            kind: WarningKind::DataAfterDone { bytes: rest.len() },
                        });
                    }
                }
                Step::End(outcome)
            }
        }
    }

    /// The input ended without `[DONE]`: fine if nothing is pending and every choice
    /// finished, a truncation error otherwise.
    pub fn end_of_input(&mut self) -> Step {
        if self.event_stream.is_some() {
            return self.end_of_event_stream();
        }
        // The framer's tolerant mode may dispatch a last event written without its blank line.
        let mut split = Ok(Flow::Continue);
        let mut dispatched = None;
        let mut framer = std::mem::take(&mut self.framer);
        let tail = framer.finish_with(|event| {
            dispatched = Some(event.line);
            split = self.event(
                event.event,
                event.data,
                event.line,
                event.offset,
                event.data_lines,
            );
            ControlFlow::Continue(())
        });
        self.framer = framer;
        if let Some(line) = dispatched {
            self.warn_unterminated(line);
        }
        if let Err(e) = split {
            return Step::End(Err(e));
        }
        let mut tail = tail;
        if self.typed_dialect() && dispatched.is_none() {
            // A typed stream's last event written without its closing blank line (seen in
            // recordings): a complete JSON object is that event.
            let pending = tail.pending_data.take().filter(|d| {
                serde_json::from_str::<serde::de::IgnoredAny>(d).is_ok() && d.trim() != "[DONE]"
            });
            match pending {
                Some(data) => {
                    if let Err(e) =
                        self.event("", &data, tail.line, tail.offset, DataLines::default())
                    {
                        return Step::End(Err(e));
                    }
                    tail.pending_bytes = 0;
                }
                None => tail.pending_data = tail.pending_data.take(),
            }
        }
        if tail.pending_data.as_deref().map(str::trim_ascii) == Some("[DONE]") {
            return Step::End(Ok(()));
        }
        let unfinished = self.unfinished();
        if tail.pending_bytes == 0 && unfinished.is_empty() {
            return Step::End(Ok(()));
        }
        Step::End(Err(Error::from(ErrorDetail::Truncated {
            line: tail.line,
            offset: tail.offset,
            pending_bytes: tail.pending_bytes,
            unfinished,
        })))
    }

    /// The end of a stream of parsed events (see [`Splitter::parsed_event`]): Chat
    /// Completions chunks carry no end marker, so their stream's end is the completion's;
    /// a typed dialect's stream says when it is complete, so choices still open then were
    /// cut short (`events`: how many there were).
    pub fn end_of_events(&mut self, events: u64) -> Step {
        let unfinished = self.unfinished();
        if unfinished.is_empty() || !self.typed_dialect() {
            return Step::End(Ok(()));
        }
        Step::End(Err(Error::from(ErrorDetail::Truncated {
            line: events,
            offset: 0,
            pending_bytes: 0,
            unfinished,
        })))
    }

    /// Warns (once per stream) that events were written without the blank line between them.
    fn warn_unterminated(&mut self, line: u64) {
        if !std::mem::replace(&mut self.warned_unterminated, true) {
            self.warnings.push(Warning {
                choice: None,
                line,
                kind: WarningKind::EventsWithoutBlankLines,
            });
        }
    }

    fn slot_for(&mut self, raw_index: i64, line: u64) -> Result<usize, Error> {
        let index = u32::try_from(raw_index).map_err(|_| ErrorDetail::InvalidChoiceIndex {
            index: raw_index,
            line,
        })?;
        let i = index as usize;
        let found = if i < SMALL_INDEXES {
            self.small
                .get(i)
                .copied()
                .filter(|&s| s != NO_SLOT)
                .map(|s| s as usize)
        } else {
            self.large.get(&index).copied()
        };
        if let Some(slot) = found {
            return Ok(slot);
        }
        if self.slots.len() >= self.max_choices {
            return Err(Error::from(ErrorDetail::TooManyChoices {
                index,
                limit: self.max_choices,
                line,
            }));
        }
        let slot = self.slots.len();
        if i < SMALL_INDEXES {
            if self.small.len() <= i {
                self.small.resize(i + 1, NO_SLOT);
            }
            self.small[i] = slot as u32;
        } else {
            self.large.insert(index, slot);
        }
        self.slots.push(Slot {
            index,
            batch: Batch::default(),
            finished: false,
        });
        Ok(slot)
    }

    /// Records the completion-level facts of one chunk (`choices`: the indexes of its
    /// choices, for the usage rule; only read when the chunk carries usage).
    fn facts(&mut self, f: Facts<'_>, choices: impl IntoIterator<Item = Option<i64>>, line: u64) {
        let meta = &mut self.meta;
        set_if_empty(&mut meta.id, f.id.as_deref());
        set_if_empty(&mut meta.model, f.model.as_deref());
        set_if_empty(
            &mut meta.system_fingerprint,
            f.system_fingerprint.as_deref(),
        );
        set_if_empty(&mut meta.service_tier, f.service_tier.as_deref());
        if meta.created.unwrap_or(0) == 0 {
            // Azure's prompt-filter chunk says `created: 0`.
            meta.created = f.created.filter(|&c| c != 0).or(meta.created);
        }
        if let Some(p) = f.prompt_filter_results.filter(|v| !v.is_null()) {
            meta.prompt_filter_results.push(p);
        }
        if let Some(usage) = f.usage.filter(is_usage) {
            let finished = self.slots.iter().filter(|s| s.finished).map(|s| s.index);
            (self.warnings).extend(meta.usage.record(usage, choices, finished, line));
        }
    }

    /// Routes one choice's element of `choices` to its batch.
    fn choice(
        &mut self,
        index: Option<i64>,
        finishes: bool,
        element: &str,
        line: u64,
        offset: u64,
    ) -> Result<(), Error> {
        let slot = self.slot_for(index.unwrap_or(0), line)?;
        if finishes {
            self.finish(slot);
        }
        self.slots[slot].batch.push_json(element, line, offset);
        Ok(())
    }

    /// A chunk the scan read: the facts it needs (strings decoded only while unknown), then
    /// every choice's element to its batch. The choices of a chunk that also carries an error
    /// are split first, so everything received before the error stays available.
    fn scanned(
        &mut self,
        s: Scanned,
        data: &str,
        (line, offset, multiline): (u64, u64, bool),
        at: &impl Fn(usize) -> u64,
    ) -> Result<(), Error> {
        let string = |range: &Option<Range<usize>>, known: bool| -> Option<Cow<'_, str>> {
            let raw = &data[range.clone().filter(|_| !known)?];
            match raw.contains('\\') {
                false => Some(Cow::Borrowed(&raw[1..raw.len() - 1])),
                true => serde_json::from_str::<String>(raw).ok().map(Cow::Owned),
            }
        };
        let value = |range: &Option<Range<usize>>| -> Option<Value> {
            crate::tree::bounded_or_none(&data[range.clone()?])
        };
        let meta = &self.meta;
        let facts = Facts {
            id: string(&s.id, meta.id.is_some()),
            model: string(&s.model, meta.model.is_some()),
            system_fingerprint: string(&s.system_fingerprint, meta.system_fingerprint.is_some()),
            service_tier: string(&s.service_tier, meta.service_tier.is_some()),
            created: match meta.created.unwrap_or(0) {
                0 => s
                    .created
                    .clone()
                    .and_then(|r| serde_json::from_str::<Created>(&data[r]).ok())
                    .and_then(|c| c.0),
                _ => None,
            },
            prompt_filter_results: value(&s.prompt_filter_results),
            usage: value(&s.usage),
        };
        self.facts(facts, s.choices.iter().map(|c| c.index), line);
        let mut result = Ok(());
        for choice in &s.choices {
            let line = match multiline {
                true => at(choice.range.start),
                false => line,
            };
            let element = &data[choice.range.clone()];
            result = self.choice(choice.index, choice.finishes, element, line, offset);
            if result.is_err() {
                break;
            }
        }
        self.scanned = s.choices;
        result?;
        upstream_error(value(&s.error), line)
    }

    /// A chunk parsed by serde (the scan left it): the same as [`Self::scanned`].
    fn envelope(
        &mut self,
        chunk: Envelope<'_>,
        elements: Vec<&RawValue>,
        data: &str,
        line: u64,
        offset: u64,
        at: &impl Fn(usize) -> u64,
    ) -> Result<(), Error> {
        let heads = chunk.choices.unwrap_or_default();
        self.facts(
            Facts {
                id: chunk.id,
                model: chunk.model,
                system_fingerprint: chunk.system_fingerprint,
                service_tier: chunk.service_tier,
                created: chunk.created,
                prompt_filter_results: raw_value(chunk.prompt_filter_results),
                usage: raw_value(chunk.usage),
            },
            heads.iter().map(|c| c.index),
            line,
        );
        let multiline = memchr::memchr(b'\n', data.as_bytes()).is_some();
        for (head, element) in heads.iter().zip(elements) {
            let finishes = head
                .finish_reason
                .is_some_and(|r| r.get().starts_with('"') && r.get() != "\"\"");
            let start = (element.get().as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
            let line = match multiline && start <= data.len() {
                true => at(start),
                false => line,
            };
            self.choice(head.index, finishes, element.get(), line, offset)?;
        }
        upstream_error(raw_value(chunk.error), line)
    }

    /// Splits one chunk that the caller parsed already.
    pub fn parsed(&mut self, chunk: ChatCompletionChunk<'static>, line: u64) -> Result<(), Error> {
        let indexes: Vec<Option<i64>> = chunk.choices.iter().take(2).map(|c| c.index).collect();
        self.facts(
            Facts {
                id: chunk.id,
                model: chunk.model,
                system_fingerprint: chunk.system_fingerprint,
                service_tier: chunk.service_tier,
                created: chunk.created,
                prompt_filter_results: chunk.prompt_filter_results,
                usage: chunk.usage,
            },
            indexes,
            line,
        );
        for choice in chunk.choices {
            let slot = self.slot_for(choice.index.unwrap_or(0), line)?;
            if (choice.finish_reason.as_deref()).is_some_and(|r| !r.is_empty()) {
                self.finish(slot);
            }
            self.slots[slot].batch.updates.push(RawUpdate {
                line,
                offset: 0,
                body: Body::Parsed(Box::new(choice)),
            });
        }
        upstream_error(chunk.error, line)
    }

    /// Interprets one SSE event: `[DONE]`, an `event: error`, or one or more chunks.
    fn event(
        &mut self,
        event: &str,
        data: &str,
        line: u64,
        offset: u64,
        data_lines: DataLines<'_>,
    ) -> Result<Flow, Error> {
        let trimmed = data.trim_ascii();
        if trimmed == "[DONE]" {
            // Also a typed dialect's stream end that some clients' recordings add: tolerated.
            return Ok(Flow::Done);
        }
        if self.dialect.is_none() && trimmed.starts_with('{') {
            self.dialect = Some(detect::detect(event, trimmed));
        }
        if self.typed_dialect() {
            return self.typed_event(event, trimmed, line, offset, data_lines);
        }
        if event == "error" {
            let value = crate::tree::bounded_or_none(trimmed)
                .unwrap_or_else(|| Value::String(trimmed.to_string()));
            return Err(Error::from(ErrorDetail::Upstream(std::sync::Arc::new(
                UpstreamError::from_value(&value, line),
            ))));
        }
        if !trimmed.starts_with('{') {
            // An array would otherwise be read as the chunk's fields by position.
            let found = trimmed
                .chars()
                .next()
                .map_or("nothing".to_string(), |c| format!("{c:?}"));
            return Err(Error::from(ErrorDetail::Json {
                line: data_lines.line(0).unwrap_or(line),
                offset,
                message: format!("expected a JSON object, found {found}"),
            }));
        }
        // The line of a choice is the data line it starts on (a chunk may span several).
        let at = |choice_start: usize| -> u64 {
            let within = data.as_bytes()[..choice_start]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            data_lines.line(within).unwrap_or(line + within as u64)
        };
        if let Some(scanned) = scan(data, std::mem::take(&mut self.scanned), &mut self.head) {
            let multiline = memchr::memchr(b'\n', data.as_bytes()).is_some();
            self.scanned(scanned, data, (line, offset, multiline), &at)?;
            return Ok(Flow::Continue);
        }
        // Serde's path.
        match serde_json::from_str::<Envelope<'_>>(data) {
            Ok(chunk) => {
                let elements = serde_json::from_str::<RawChoices<'_>>(data)
                    .map(|raw| raw.choices.unwrap_or_default())
                    .unwrap_or_default();
                self.envelope(chunk, elements, data, line, offset, &at)?;
            }
            Err(first_error) => {
                // Several objects on one line (seen in the wild): apply them all, in order.
                let mut count = 0;
                let mut objects =
                    serde_json::Deserializer::from_str(data).into_iter::<Envelope<'_>>();
                let mut raws =
                    serde_json::Deserializer::from_str(data).into_iter::<RawChoices<'_>>();
                for next in &mut objects {
                    match next {
                        Ok(chunk) => {
                            count += 1;
                            let elements = match raws.next() {
                                Some(Ok(raw)) => raw.choices.unwrap_or_default(),
                                _ => Vec::new(),
                            };
                            self.envelope(chunk, elements, data, line, offset, &at)?;
                        }
                        Err(e) => return Err(json_error(&e, line, offset, data_lines)),
                    }
                }
                match count {
                    0 => return Err(json_error(&first_error, line, offset, data_lines)),
                    1 => {}
                    count => self.warnings.push(Warning {
                        choice: None,
                        line,
                        kind: WarningKind::ConcatenatedObjects { count },
                    }),
                }
            }
        }
        Ok(Flow::Continue)
    }
}

/// A value already parsed by the caller, one per event: a Chat Completions chunk
/// ([`ChatCompletionChunk`]) or a JSON event of any dialect (`serde_json::Value`). Implemented
/// for those two types only.
///
/// ```
/// fn takes(_: impl choicewise_proto::Parsed) {}
/// takes(serde_json::json!({"choices": []}));
/// ```
pub trait Parsed: sealed::Sealed + Send + 'static {
    /// Routes the `count`-th value (its count stands in for the line number).
    #[doc(hidden)]
    fn route(self, splitter: &mut Splitter, count: u64) -> Result<(), Error>;
    /// The end of the input after `count` values.
    #[doc(hidden)]
    fn end(splitter: &mut Splitter, count: u64) -> Step;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::ChatCompletionChunk<'static> {}
    impl Sealed for serde_json::Value {}
}

impl Parsed for ChatCompletionChunk<'static> {
    fn route(self, splitter: &mut Splitter, count: u64) -> Result<(), Error> {
        splitter.parsed(self, count)
    }
    fn end(_: &mut Splitter, _: u64) -> Step {
        Step::End(Ok(()))
    }
}

impl Parsed for Value {
    fn route(self, splitter: &mut Splitter, count: u64) -> Result<(), Error> {
        splitter.parsed_event(self, count)
    }
    fn end(splitter: &mut Splitter, count: u64) -> Step {
        splitter.end_of_events(count)
    }
}

fn set_if_empty(slot: &mut Option<String>, value: Option<&str>) {
    if slot.is_none()
        && let Some(v) = value.filter(|v| !v.is_empty())
    {
        *slot = Some(v.to_string());
    }
}

/// A usage object worth keeping: an object with at least one field (LiteLLM sends `{}`).
fn is_usage(v: &Value) -> bool {
    v.as_object().is_some_and(|o| !o.is_empty())
}

/// What one SSE event meant to the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Done,
}

/// Whether a framer goes on after an event the stream `read` so; when it stops, why is kept
/// in `stop` (the stream's end, or its error). The SSE and the event-stream framing alike.
fn go_on(read: Result<Flow, Error>, stop: &mut Option<Result<(), Error>>) -> ControlFlow<()> {
    match read {
        Ok(Flow::Continue) => ControlFlow::Continue(()),
        Ok(Flow::Done) => {
            *stop = Some(Ok(()));
            ControlFlow::Break(())
        }
        Err(e) => {
            *stop = Some(Err(e));
            ControlFlow::Break(())
        }
    }
}

/// A JSON error at the line of the event it is on: serde_json counts lines within the data
/// (its data lines joined), which other fields and comments may stand between.
fn json_error(e: &serde_json::Error, line: u64, offset: u64, data_lines: DataLines<'_>) -> Error {
    let within = e.line().saturating_sub(1);
    Error::from(ErrorDetail::Json {
        line: data_lines.line(within).unwrap_or(line + within as u64),
        offset,
        message: e.to_string(),
    })
}

/// How a JSON value's type is named in errors.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

mod batch;
mod detect;
mod envelope;
pub(crate) mod event_stream;
#[cfg(test)]
mod tests;
mod typed;

pub use batch::{Batch, BatchPool, Meta};
pub(crate) use batch::{Body, RawUpdate, Slot};
