//! A relayed Chat Completions stream, as data ([`ChatRelay`]): each upstream chunk scanned
//! ([`chunk_facts`]) and passed on as it came, its `id`, `model` and `created` the
//! answer's own; of each choice (by its `index`) only what the record and the limits read
//! is parsed (its texts, its finish), of the chunk its usage and its error. What the
//! gateway adds (several choices' openings, a finish at the bound of tokens, a failure, the
//! usage with its `choicewise` parts, the tries' summary, `[DONE]`) is written by the Chat
//! framing the general path writes with, so that an answer reads the same on both paths.

use std::borrow::Cow;
use std::ops::{ControlFlow, Range};

use choicewise_core::chunks::Envelope;
use choicewise_core::chunks::{ChunkFacts, ChunkScanner, ReportedUsage, element_text};
use choicewise_core::input::{TokenBound, TokenCount};
use choicewise_core::{ChoiceEvent, Error, ErrorDetail, UpstreamError};
use choicewise_sse::Framer;
use serde::Deserialize;

use crate::answer::ending::{AnswerEnd, Cut, OutputEnd, Seen, decide};
use crate::answer::write::{Framing, Tail};
use crate::api::chat::ChatFraming;

/// The bytes first set aside for a choice's elements kept unparsed: a short answer's.
const ELEMENTS_ROOM: usize = 4096;

/// The ends first set aside for them: as many as elements of a short text fit that room.
const ENDS_ROOM: usize = ELEMENTS_ROOM / 64;

/// One choice of a chunk, as far as the relay reads it: its texts and its finish.
#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

/// A choice's delta: the texts its output is counted by (content, refusal, reasoning, and
/// its calls' arguments).
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<Call<'a>>>,
    #[serde(borrow, default)]
    function_call: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Call<'a> {
    #[serde(borrow, default)]
    function: Option<Function<'a>>,
    /// A custom tool's call (its input).
    #[serde(borrow, default)]
    custom: Option<Custom<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Custom<'a> {
    #[serde(borrow, default)]
    input: Option<Cow<'a, str>>,
}

/// A chunk's `usage`, as far as the record reads it.
#[derive(Deserialize, Default)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// The tokens an upstream reported for its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reported {
    pub(crate) prompt: u64,
    pub(crate) completion: u64,
}

/// Whether the relay reads on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fed {
    /// More may come.
    More,
    /// The upstream said `[DONE]`: what it sends after it (its body's end) is not relayed.
    Done,
    /// The answer is over (an error, the bound passed): read no more.
    Over,
}

/// A Chat Completions stream relayed to a Chat Completions client: what it has passed on
/// and what it learned on the way.
pub(crate) struct ChatRelay {
    framer: Framer,
    scanner: ChunkScanner,
    state: State,
}

/// What the relay learned, apart from its framer (which lends it each event).
struct State {
    framing: ChatFraming,
    /// The answer's own `id`, `model` and `created`, as JSON.
    id: Vec<u8>,
    model: Vec<u8>,
    created: Vec<u8>,
    /// Each choice's, by its index.
    lanes: Vec<Lane>,
    /// The bound's tokens: as many bytes of a choice's elements may be kept unparsed (each
    /// element's bytes are at least its texts', each token at least a byte), 0 without a
    /// bound.
    room: u64,
    /// The most bytes of elements a choice may send (`max_answer_bytes`): past it, it
    /// fails alone, as the general path's `max_choice_bytes` fails it.
    max_choice_bytes: usize,
    /// The choices finished so far (the order of their finishes).
    finished: u64,
    /// The choices closed so far: finished, or failed alone.
    closed: usize,
    /// The usages the upstream reported, added up as the general path adds them up.
    usage: ReportedUsage,
    /// The answer's own failure (its stream's), which ends every choice still open.
    failure: Option<Error>,
    /// The model the upstream named.
    response_model: Option<String>,
    /// Updates of choices after their finish, left out.
    after_finish: usize,
    over: bool,
    /// `[DONE]` came.
    done: bool,
    /// Bytes fed so far.
    offset: u64,
    /// The elements of the chunk being read that are passed on (when some are left out).
    kept: Vec<Kept>,
    /// Of several choices, the openings the gateway writes before the upstream's first
    /// chunk, until they are taken.
    openings: Vec<u8>,
    /// Of several choices, each element's `role` is left out: the gateway's openings said
    /// it, as the general path says it.
    strip_roles: bool,
}

/// An element of a chunk that is passed on: as it came (its place in the chunk), or
/// written again without its `role`.
enum Kept {
    Came(Range<usize>),
    Written(String),
}

/// What the relay keeps of one choice.
struct Lane {
    /// Bytes of its elements so far.
    bytes: usize,
    /// Its output against its bound of tokens, if it has one (the general path's count).
    bound: Option<TokenCount>,
    /// Its elements' texts are counted against the bound as they come: their bytes passed
    /// [`State::room`].
    counting: bool,
    /// Its texts so far, when a bound counts them as they come.
    texts: String,
    /// Until the bound counts the texts as they come (without a bound, to the end), its
    /// elements as they came, one after the other: their texts are read only if needed
    /// (the bound, or the upstream reporting no usage: its estimate).
    elements: Vec<u8>,
    /// Where each element kept in [`Lane::elements`] ends.
    ends: Vec<usize>,
    finish: Option<String>,
    /// Its place among the choices' finishes.
    place: Option<u64>,
    /// The finish was the gateway's, at the bound of tokens.
    at_bound: bool,
    /// Its upstream said its finish (a usage-only chunk after it is its own, as llama.cpp
    /// sends them), even past the gateway's.
    finish_came: bool,
    /// Its own failure: an update that was not one.
    failure: Option<Error>,
}

impl ChatRelay {
    /// The relay of a stream of `n` choices answered under `envelope`; `logprobs` and
    /// `include_usage` as the client asked; `bound`: the most tokens each choice's output
    /// may take; `max_choice_bytes`: the most bytes of elements each may send.
    pub(crate) fn new(
        envelope: &Envelope,
        n: usize,
        (logprobs, include_usage): (bool, bool),
        bound: Option<TokenBound>,
        (max_event_size, max_choice_bytes): (usize, usize),
    ) -> ChatRelay {
        let n = n.max(1);
        let mut framing = ChatFraming::new(envelope, n, &envelope.model, (logprobs, include_usage));
        // One choice: the upstream's first chunk opens it, and what the gateway writes is
        // never an opening. Several: the gateway opens them all first, in index order, as
        // the general path does (an upstream may start them in any order, and a client
        // such as openai-python's stream helper reads a choice's first element as its
        // next one).
        let mut openings = Vec::new();
        match n {
            1 => framing.opened(),
            _ => framing.open(&mut openings),
        }
        let json = |s: &str| serde_json::to_vec(s).unwrap_or_default();
        let lane = || Lane {
            bytes: 0,
            bound: bound.map(TokenCount::new),
            counting: false,
            texts: String::new(),
            elements: Vec::new(),
            ends: Vec::new(),
            finish: None,
            place: None,
            at_bound: false,
            finish_came: false,
            failure: None,
        };
        ChatRelay {
            framer: Framer::with_max_event_size(max_event_size),
            scanner: ChunkScanner::new(),
            state: State {
                framing,
                id: json(&envelope.id),
                model: json(&envelope.model),
                created: itoa::Buffer::new().format(envelope.created).into(),
                lanes: (0..n).map(|_| lane()).collect(),
                room: bound.map_or(0, |b| b.max),
                max_choice_bytes,
                finished: 0,
                closed: 0,
                usage: ReportedUsage::default(),
                failure: None,
                response_model: None,
                after_finish: 0,
                over: false,
                done: false,
                offset: 0,
                kept: Vec::new(),
                openings,
                strip_roles: n > 1,
            },
        }
    }

    /// Of several choices, their openings, written by the gateway before the upstream's
    /// chunks (empty once taken, and for one choice).
    pub(crate) fn take_openings(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.state.openings)
    }

    /// Relays one read of the upstream's bytes: every whole event in it, passed on into
    /// `write`.
    pub(crate) fn feed(&mut self, bytes: &[u8], write: &mut Vec<u8>) -> Fed {
        let ChatRelay {
            framer,
            scanner,
            state,
        } = self;
        if !state.over {
            let fed = framer.feed(bytes, |e| state.event(scanner, e.data, e.line, write));
            state.offset += bytes.len() as u64;
            if let Err(e) = fed {
                state.fail(Error::from(ErrorDetail::Sse(e)));
            }
        }
        match (state.over, state.done) {
            (false, _) => Fed::More,
            (true, true) => Fed::Done,
            (true, false) => Fed::Over,
        }
    }

    /// The upstream's reads failed with `message` (a closed connection, the answer past
    /// its bytes), or it fell silent for `idle`.
    pub(crate) fn failed(&mut self, message: String, idle: Option<std::time::Duration>) {
        let offset = self.state.offset;
        let detail = match idle {
            Some(after) => ErrorDetail::IdleTimeout { after, offset },
            None => ErrorDetail::Transport {
                offset,
                message,
                source: None,
                unfinished: (self.state.lanes.iter().enumerate())
                    .filter(|(_, lane)| !lane.closed())
                    .map(|(i, _)| i as u32)
                    .collect(),
            },
        };
        self.state.fail(Error::from(detail));
    }

    /// Whether every choice is closed (finished at its upstream's word or the bound's, or
    /// failed alone): nothing is awaited but the stream's end.
    pub(crate) fn closed(&self) -> bool {
        self.state.closed == self.state.lanes.len()
    }

    /// Whether every choice finished (its upstream's finish, or the bound's).
    pub(crate) fn finished(&self) -> bool {
        self.state.lanes.iter().all(|lane| lane.finish.is_some())
    }

    /// How many choices the answer has.
    pub(crate) fn choices(&self) -> usize {
        self.state.lanes.len()
    }

    /// Ends the answer: each choice's ending decided (`cut`: why the answer was cut short,
    /// if it was) and written as the Chat framing writes it, then the tail (the `usage`
    /// the gateway estimated, when the client asked for it and the upstream reported none;
    /// the tries' `summary`), then `[DONE]`. The choices' endings, by index, and the
    /// answer's verdict.
    pub(crate) fn end(
        &mut self,
        cut: Option<Cut>,
        tail: Tail,
        write: &mut Vec<u8>,
    ) -> (Vec<OutputEnd>, AnswerEnd) {
        let state = &mut self.state;
        state.over = true;
        let ends: Vec<OutputEnd> = (state.lanes.iter())
            .map(|lane| {
                // The stream's failure is that of the choices it left open.
                let error = (lane.failure.clone())
                    .or_else(|| state.failure.clone().filter(|_| lane.finish.is_none()));
                let seen = Seen {
                    error,
                    finish: lane.finish.as_deref().map(choicewise_core::Text::from),
                    stopped: None,
                };
                decide(Some(&seen), cut)
            })
            .collect();
        for (o, end) in ends.iter().enumerate() {
            state.framing.end(o, end, write);
        }
        let answer = AnswerEnd::of(&ends, true);
        state.framing.tail(&ends, &answer, tail, write);
        (ends, answer)
    }

    /// The usage the upstream reported, if it did: one total, or one a choice added up
    /// (llama.cpp's), or vLLM's running counts added up.
    pub(crate) fn reported(&self) -> Option<Reported> {
        let usage = self.state.usage.usage()?;
        Some(Reported {
            prompt: usage.prompt_tokens,
            completion: usage.completion_tokens,
        })
    }

    /// Each choice's own output tokens, where the upstream reported a choice's apart (one
    /// usage-only chunk after each choice's finish, or a running count of each): by index.
    pub(crate) fn reported_own(&self) -> Vec<Option<u64>> {
        let own = self.state.usage.per_choice();
        (0..self.state.lanes.len() as u32)
            .map(|i| own.get(&i).copied())
            .collect()
    }

    /// Choice `i`'s texts (its tokens' estimate, or its weight in a shared total): those
    /// counted against its bound, or read now from its elements.
    pub(crate) fn texts(&mut self, i: usize) -> &str {
        let Some(lane) = self.state.lanes.get_mut(i) else {
            return "";
        };
        // Read as far as they parse: an element that does not is the client's as it came.
        let _ = lane.take_elements(Reading::Texts);
        &lane.texts
    }

    /// How choice `i` finished (its reason), if it did.
    pub(crate) fn finish(&self, i: usize) -> Option<&str> {
        self.state.lanes.get(i)?.finish.as_deref()
    }

    /// Choice `i`'s place among the choices' finishes, if it finished.
    pub(crate) fn place(&self, i: usize) -> Option<u64> {
        self.state.lanes.get(i)?.place
    }

    /// Whether the gateway finished choice `i` at its bound of tokens.
    #[cfg(test)]
    pub(crate) fn at_bound(&self, i: usize) -> bool {
        self.state.lanes[i].at_bound
    }

    /// The model the upstream named in its answer.
    pub(crate) fn response_model(&self) -> Option<&str> {
        self.state.response_model.as_deref()
    }

    /// Updates of the choices that came after their finish, left out.
    pub(crate) fn after_finish(&self) -> usize {
        self.state.after_finish
    }
}

impl State {
    /// The event at `line` is not a chunk: `message` says why.
    fn fail_json(&mut self, line: u64, message: String) {
        let offset = self.offset;
        self.fail(Error::from(ErrorDetail::Json {
            line,
            offset,
            message,
        }));
    }

    /// The answer failed upstream with `error`, unless every choice had closed.
    fn fail(&mut self, error: Error) {
        if self.closed < self.lanes.len() && self.failure.is_none() {
            self.failure = Some(error);
        }
        self.over = true;
    }

    /// One event's `data` (at `line`), its facts found by `scanner`: relayed, or what it
    /// says taken.
    fn event(
        &mut self,
        scanner: &mut ChunkScanner,
        data: &str,
        line: u64,
        write: &mut Vec<u8>,
    ) -> ControlFlow<()> {
        if self.over {
            return ControlFlow::Break(());
        }
        let data = data.trim();
        if data == "[DONE]" {
            (self.over, self.done) = (true, true);
            return ControlFlow::Break(());
        }
        if data.is_empty() {
            return ControlFlow::Continue(());
        }
        let normalised;
        let data = match scanner.scan(data) {
            Some(_) => data,
            // A chunk the scan cannot vouch for: parsed, written again, then scanned.
            None => match normalise(data) {
                Ok(text) if scanner.scan(&text).is_some() => {
                    normalised = text;
                    &normalised
                }
                Ok(_) => {
                    self.fail_json(line, "a chunk of an unexpected shape".into());
                    return ControlFlow::Break(());
                }
                Err(message) => {
                    self.fail_json(line, message);
                    return ControlFlow::Break(());
                }
            },
        };
        let facts = scanner.facts();
        if let Some(error) = facts.error() {
            let value: serde_json::Value = serde_json::from_str(&data[error]).unwrap_or_default();
            let wrapped = serde_json::json!({ "error": value });
            let error = UpstreamError::from_value(&wrapped, line);
            self.fail(Error::from(ErrorDetail::Upstream(std::sync::Arc::new(
                error,
            ))));
            return ControlFlow::Break(());
        }
        if self.response_model.is_none()
            && let Some(model) = facts.model()
        {
            self.response_model = serde_json::from_str(&data[model]).ok();
        }
        let n = self.lanes.len();
        // Several choices' texts are always read (their shares of the usage, or their
        // estimates): each as it comes, the text of a chunk of one choice whose delta is
        // one string as the scan found it. One choice's are read only if its upstream
        // reports no usage: at the end.
        let eager = n > 1;
        let sole = eager.then(|| facts.sole_text(data)).flatten();
        // The choices past their bound in this chunk, finished once it is written.
        let mut passed: Vec<usize> = Vec::new();
        self.kept.clear();
        for choice in facts.choices() {
            let i = match (n, choice.index) {
                // One choice: whatever its upstream numbers it.
                (1, _) | (_, None) => 0,
                (_, Some(i)) => match usize::try_from(i).ok().filter(|i| *i < n) {
                    Some(i) => i,
                    None => {
                        let message = format!("choice index {i} is past the {n} choices asked");
                        self.fail_json(line, message);
                        return ControlFlow::Break(());
                    }
                },
            };
            let lane = &mut self.lanes[i];
            lane.finish_came |= choice.finishes;
            if lane.closed() {
                // As the general path: a choice is what it was at its finish.
                self.after_finish += usize::from(lane.failure.is_none());
                continue;
            }
            let element = &data[choice.range.clone()];
            lane.bytes = lane.bytes.saturating_add(element.len());
            let result = match lane.bytes > self.max_choice_bytes {
                // Past its bytes: it fails alone, its element left out.
                true => Err(ErrorDetail::ChoiceTooLarge {
                    choice: i as u32,
                    limit: self.max_choice_bytes,
                    line,
                    offset: self.offset,
                }),
                false => lane
                    .element(element, choice.finishes, self.room, (eager, sole))
                    .map_err(|e| ErrorDetail::InvalidUpdate {
                        choice: i as u32,
                        line,
                        offset: self.offset,
                        message: e.to_string(),
                    }),
            };
            match result {
                Ok(passes) => {
                    let without_role = (self.strip_roles && element.contains("\"role\""))
                        .then(|| without_role(element))
                        .flatten();
                    self.kept.push(match without_role {
                        Some(written) => Kept::Written(written),
                        None => Kept::Came(choice.range.clone()),
                    });
                    if passes {
                        passed.push(i);
                    }
                }
                // Only that choice fails, as on the general path: its element is left out.
                Err(detail) => lane.failure = Some(Error::from(detail)),
            }
            let lane = &mut self.lanes[i];
            if lane.closed() {
                if lane.finish.is_some() {
                    lane.place = Some(self.finished);
                    self.finished += 1;
                }
                self.closed += 1;
            }
        }
        // Of a usage, only its two counts are read (a usage of many keys is not made a
        // tree); one without both is no report: the answer is counted here rather than
        // charged a zero the upstream did not say. Its bytes are the upstream's answer's,
        // bounded with them (`max_answer_bytes`).
        if let Some(usage) = facts.usage()
            && let Ok(Some(Usage {
                prompt_tokens: Some(prompt),
                completion_tokens: Some(completion),
            })) = serde_json::from_str::<Option<Usage>>(&data[usage])
        {
            let usage = serde_json::json!({
                "prompt_tokens": prompt,
                "completion_tokens": completion,
            });
            let indexes = facts.choices().iter().map(|c| c.index);
            let finished = (self.lanes.iter().enumerate())
                .filter(|(_, lane)| lane.finish_came)
                .map(|(i, _)| i as u32);
            let _ = self.usage.record(usage, indexes, finished, line);
        }
        let shown = match facts.choices().is_empty() {
            // A chunk of its usage alone is not passed on: the answer's usage, when the
            // client asked for it, is the gateway's (its `choicewise` parts), in its tail.
            true => facts.usage().is_none(),
            false => !self.kept.is_empty(),
        };
        if shown {
            let rewritten = self.kept.len() < facts.choices().len()
                || (self.kept.iter()).any(|k| matches!(k, Kept::Written(_)));
            self.write(data, facts, rewritten, write);
        }
        for i in passed {
            let lane = &mut self.lanes[i];
            if lane.finish.is_some() {
                continue;
            }
            // Past its bound of tokens: finished there, as the general path finishes it.
            let mut element = Vec::new();
            let finished = ChoiceEvent::Finished("length".into());
            self.framing.event(i, &finished, &mut element);
            write.extend_from_slice(&element);
            lane.finish = Some("length".to_string());
            lane.at_bound = true;
            lane.place = Some(self.finished);
            self.finished += 1;
            self.closed += 1;
        }
        if self.closed == n
            && (self.lanes.iter()).any(|lane| lane.at_bound || lane.failure.is_some())
        {
            // Every choice closed, one by the gateway (its bound, or an update that was
            // not one): nothing is awaited, and its upstream is let go.
            self.over = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// Writes the chunk `data` as its event, its `id`, `model` and `created` the answer's,
    /// and (`rewritten`) its choices those [`State::kept`].
    fn write(&self, data: &str, facts: &ChunkFacts, rewritten: bool, write: &mut Vec<u8>) {
        /// What a span of the chunk is written as.
        enum With<'a> {
            Bytes(&'a [u8]),
            Elements(&'a [Kept]),
        }
        let choices = facts.choices();
        let elements = match (rewritten, choices.first(), choices.last()) {
            (true, Some(first), Some(last)) => Some(first.range.start..last.range.end),
            _ => None,
        };
        let mut spans: [(Option<Range<usize>>, With); 4] = [
            (facts.id(), With::Bytes(&self.id)),
            (facts.model(), With::Bytes(&self.model)),
            (facts.created(), With::Bytes(&self.created)),
            (elements, With::Elements(&self.kept)),
        ];
        // Most chunks have them in this order already (their head repeats).
        let start = |(range, _): &(Option<Range<usize>>, With)| {
            range.as_ref().map_or(usize::MAX, |r| r.start)
        };
        if !spans.is_sorted_by_key(start) {
            spans.sort_by_key(start);
        }
        let spans = spans.into_iter().filter_map(|(r, with)| Some((r?, with)));
        write.reserve(data.len() + 64);
        write.extend_from_slice(b"data: ");
        let mut at = 0;
        let bytes = data.as_bytes();
        for (range, with) in spans {
            // The scan's places, never trusted to index: one that did not fit would be
            // left as the upstream wrote it.
            if let Some(before) = bytes.get(at..range.start)
                && range.end <= bytes.len()
            {
                write.extend_from_slice(before);
                match with {
                    With::Bytes(bytes) => write.extend_from_slice(bytes),
                    With::Elements(kept) => {
                        for (k, element) in kept.iter().enumerate() {
                            if k > 0 {
                                write.push(b',');
                            }
                            let element = match element {
                                Kept::Came(range) => bytes.get(range.clone()).unwrap_or_default(),
                                Kept::Written(text) => text.as_bytes(),
                            };
                            write.extend_from_slice(element);
                        }
                    }
                }
                at = range.end;
            }
        }
        write.extend_from_slice(bytes.get(at..).unwrap_or_default());
        write.extend_from_slice(b"\n\n");
    }
}

impl Lane {
    /// Finished, or failed alone: what comes for it is left out.
    fn closed(&self) -> bool {
        self.finish.is_some() || self.failure.is_some()
    }

    /// Takes one of its elements (`finishes`: the scan saw its finish), kept as it came
    /// and parsed only for its finish until its texts are counted against its bound
    /// (without one, to the end; later, for its texts if they are needed): whether it
    /// passes its bound now; an error if it is not a choice's update.
    fn element(
        &mut self,
        element: &str,
        finishes: bool,
        room: u64,
        (eager, sole): (bool, Option<(&str, &str)>),
    ) -> serde_json::Result<bool> {
        // Without a bound, an element is read only for its texts. Read `eager`ly, its text
        // is taken now, unkept (the one the scan found, else a parse's), while none is
        // kept before it: the texts stay in order, and one that does not parse is kept,
        // as are those after it, so that the texts end there as at the end.
        if eager && self.bound.is_none() && self.elements.is_empty() {
            if !finishes && let Some(piece) = sole.and_then(sole_piece) {
                self.texts.push_str(piece);
                return Ok(false);
            }
            if let Ok(choice) = serde_json::from_str::<Choice>(element) {
                self.take(&choice);
                if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                    self.finish = Some(reason.into_owned());
                }
                return Ok(false);
            }
        }
        let counted = match self.bound.is_some() && !self.counting {
            // An element kept unparsed that is not a choice fails it once the texts are
            // counted, rather than let it pass its bound uncounted.
            true => self.count_from(element, room)?,
            false => self.bound.is_some(),
        };
        if !counted {
            if self.elements.capacity() == 0 {
                // Room for a short answer's elements at once, rather than growing through
                // each size up to it.
                self.elements.reserve(ELEMENTS_ROOM);
                self.ends.reserve(ENDS_ROOM);
            }
            self.elements.extend_from_slice(element.as_bytes());
            self.ends.push(self.elements.len());
            if !finishes {
                return Ok(false);
            }
        }
        let choice: Choice = serde_json::from_str(element)?;
        let passes = counted && self.take(&choice);
        if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
            self.finish = Some(reason.into_owned());
        }
        Ok(passes)
    }

    /// Whether the texts are counted against the bound from `element` on: once the
    /// elements' bytes pass `room`, the texts of those kept so far are taken first (an
    /// error if one of them is not a choice).
    fn count_from(&mut self, element: &str, room: u64) -> serde_json::Result<bool> {
        let kept = (self.elements.len() + element.len()) as u64;
        if kept <= room {
            return Ok(false);
        }
        self.counting = true;
        self.take_elements(Reading::Checked).map(|()| true)
    }

    /// Takes the texts of the elements kept so far, up to the first that is not a choice
    /// (its error). Read for their texts alone, an element whose `delta` is one string
    /// ([`element_text`]) without escapes is taken as it is, unparsed.
    fn take_elements(&mut self, reading: Reading) -> serde_json::Result<()> {
        let elements = std::mem::take(&mut self.elements);
        let ends = std::mem::take(&mut self.ends);
        let mut start = 0;
        for end in ends {
            let element = elements.get(start..end).unwrap_or_default();
            start = end;
            if reading == Reading::Texts
                && let Ok(element) = std::str::from_utf8(element)
                && let Some(piece) = element_text(element).and_then(sole_piece)
            {
                self.texts.push_str(piece);
                continue;
            }
            self.take(&serde_json::from_slice::<Choice>(element)?);
        }
        Ok(())
    }

    /// Takes a choice's texts into the output: whether it passes its bound now.
    fn take(&mut self, choice: &Choice) -> bool {
        let Some(delta) = &choice.delta else {
            return false;
        };
        let calls = (delta.tool_calls.iter().flatten()).flat_map(|c| {
            let function = c.function.as_ref().and_then(|f| f.arguments.as_deref());
            let custom = c.custom.as_ref().and_then(|c| c.input.as_deref());
            function.into_iter().chain(custom)
        });
        let texts = [
            &delta.content,
            &delta.refusal,
            &delta.reasoning_content,
            &delta.reasoning,
        ];
        let function = (delta.function_call.as_ref()).and_then(|f| f.arguments.as_deref());
        let pieces = (texts.into_iter().filter_map(|t| t.as_deref()))
            .chain(calls)
            .chain(function);
        for piece in pieces {
            self.texts.push_str(piece);
            if let Some(bound) = &mut self.bound {
                bound.add(piece);
            }
        }
        // Checked once an update, as a choice's own lifecycle checks it.
        let texts = &self.texts;
        (self.bound.as_mut()).is_some_and(|bound| bound.passes(|| texts.as_str()))
    }
}

/// What a delta's sole string member (its key and contents, as they came) adds to the
/// output's texts, as [`Lane::take`] would take it: its contents for a text, nothing for an
/// opening (`role`); `None` when a parse must say (another key, or contents with an escape
/// or a control character, which a parse reads or refuses).
fn sole_piece<'a>((key, contents): (&str, &'a str)) -> Option<&'a str> {
    if contents.bytes().any(|b| b == b'\\' || b < 0x20) {
        return None;
    }
    match key {
        "content" | "refusal" | "reasoning_content" | "reasoning" => Some(contents),
        "role" => Some(""),
        _ => None,
    }
}

/// How the elements kept unparsed are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Each parsed, as its bound counts it: one that is not a choice's update fails it.
    Checked,
    /// For their texts, as far as they go (an estimate, or a share's weight).
    Texts,
}

/// A choice's element written again without its delta's `role`, if it had one (and is a
/// JSON object): every other member as it came, in its order (its values' bytes, a
/// `logprobs` as the upstream wrote it).
fn without_role(element: &str) -> Option<String> {
    let Members(members) = serde_json::from_str(element).ok()?;
    let mut out = String::with_capacity(element.len());
    let mut found = false;
    out.push('{');
    for (k, (key, value)) in members.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        push_key(&mut out, key);
        // Only the delta is read member by member (another member's value, a number or a
        // `null`, would be a parse's error to make and drop).
        let delta = (key == "delta")
            .then(|| serde_json::from_str::<Members>(value.get()).ok())
            .flatten();
        match delta {
            Some(Members(delta)) if delta.iter().any(|(k, _)| k == "role") => {
                found = true;
                out.push('{');
                let kept = delta.iter().filter(|(k, _)| k != "role");
                for (j, (key, value)) in kept.enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    push_key(&mut out, key);
                    out.push_str(value.get());
                }
                out.push('}');
            }
            _ => out.push_str(value.get()),
        }
    }
    out.push('}');
    found.then_some(out)
}

/// Writes `key` as a JSON object's key, and its colon.
fn push_key(out: &mut String, key: &str) {
    out.push_str(&serde_json::to_string(key).unwrap_or_default());
    out.push(':');
}

/// A JSON object's members in order, each value's bytes as they came.
struct Members<'a>(Vec<(String, &'a serde_json::value::RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Members<'a>, M::Error> {
                let mut members = Vec::new();
                while let Some(member) =
                    map.next_entry::<String, &'de serde_json::value::RawValue>()?
                {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// A chunk the scan could not vouch for, parsed and written again (compact, its keys as
/// they came), for the scan; or why it is not a chunk.
fn normalise(data: &str) -> Result<String, String> {
    let value: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(data).map_err(|e| e.to_string())?;
    serde_json::to_string(&value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UP: &str = concat!(
        r#"data: {"id":"up-1","object":"chat.completion.chunk","created":1,"model":"up","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null,"x_vendor":{"k":[1,2]}}]}"#,
        "\n\n",
        r#"data: {"id":"up-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
        "\n\n",
        r#"data: {"id":"up-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":" late"},"finish_reason":null}]}"#,
        "\n\n",
        r#"data: {"id":"up-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}"#,
        "\n\ndata: [DONE]\n\n",
    );

    fn envelope() -> Envelope {
        Envelope {
            id: "chatcmpl-gw".into(),
            created: 5,
            model: "m".into(),
        }
    }

    fn words(text: &str) -> u64 {
        text.split_whitespace().count() as u64
    }

    /// The relay of `reads`, each fed as one read: what it wrote, and the relay.
    fn relayed(reads: &[&[u8]], bound: Option<u64>) -> (String, ChatRelay) {
        relayed_n(1, reads, bound)
    }

    /// [`relayed`] of `n` choices.
    fn relayed_n(n: usize, reads: &[&[u8]], bound: Option<u64>) -> (String, ChatRelay) {
        relayed_within(n, reads, bound, usize::MAX)
    }

    /// [`relayed_n`], each choice's elements within `max_choice_bytes`.
    fn relayed_within(
        n: usize,
        reads: &[&[u8]],
        bound: Option<u64>,
        max_choice_bytes: usize,
    ) -> (String, ChatRelay) {
        let bound = bound.map(|max| TokenBound::new(max, words));
        let sizes = (1 << 20, max_choice_bytes);
        let mut relay = ChatRelay::new(&envelope(), n, (false, false), bound, sizes);
        let mut write = relay.take_openings();
        for read in reads {
            if relay.feed(read, &mut write) != Fed::More {
                break;
            }
        }
        (String::from_utf8(write).unwrap(), relay)
    }

    fn data(text: &str) -> Vec<serde_json::Value> {
        (text.lines().filter_map(|l| l.strip_prefix("data: ")))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn chunks_pass_as_they_came_under_the_answers_own_id_and_model() {
        let (text, mut relay) = relayed(&[UP.as_bytes()], None);
        let chunks = data(&text);
        // The finish's chunk is the last: what came after it for the choice is left out,
        // the usage alone is the tail's, and `[DONE]` is the gateway's to write.
        assert_eq!(chunks.len(), 2, "{text}");
        for chunk in &chunks {
            assert_eq!(
                (&chunk["id"], &chunk["model"], &chunk["created"]),
                (&"chatcmpl-gw".into(), &"m".into(), &5.into())
            );
        }
        assert_eq!(chunks[0]["system_fingerprint"], "fp");
        assert_eq!(chunks[0]["choices"][0]["x_vendor"]["k"][1], 2);
        assert_eq!(chunks[1]["choices"][0]["finish_reason"], "stop");
        assert_eq!(relay.texts(0), "Hello");
        assert_eq!(relay.after_finish(), 1);
        assert_eq!(
            relay.reported(),
            Some(Reported {
                prompt: 7,
                completion: 2
            })
        );
        assert_eq!(relay.response_model(), Some("up"));
        assert!(!text.contains("[DONE]") && !text.contains("usage"));
    }

    #[test]
    fn every_order_of_a_chunks_keys_is_relayed_under_the_answers_id_and_model() {
        let keys = ["id", "object", "created", "model", "choices"];
        // Every rotation and its reverse: each key first, last and between.
        let mut orders: Vec<Vec<&str>> = Vec::new();
        for r in 0..keys.len() {
            let mut order = keys.to_vec();
            order.rotate_left(r);
            orders.push(order.clone());
            order.reverse();
            orders.push(order);
        }
        for order in orders {
            let chunk = |content: &str, finish: &str| {
                let value = |key: &str| match key {
                    "id" => "\"up-1\"".to_string(),
                    "object" => "\"chat.completion.chunk\"".to_string(),
                    "created" => "1".to_string(),
                    "model" => "\"up\"".to_string(),
                    _ => format!(
                        "[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}},\"finish_reason\":{finish}}}]"
                    ),
                };
                let members: Vec<String> = order
                    .iter()
                    .map(|k| format!("\"{k}\":{}", value(k)))
                    .collect();
                format!("data: {{{}}}\n\n", members.join(","))
            };
            let up = [
                chunk("a", "null"),
                chunk("a longer text", "null"),
                chunk("", "\"stop\""),
            ]
            .concat();
            let (text, mut relay) = relayed(&[up.as_bytes()], None);
            let chunks = data(&text);
            assert_eq!(chunks.len(), 3, "{order:?}: {text}");
            for chunk in &chunks {
                assert_eq!(chunk["id"], "chatcmpl-gw", "{order:?}: {text}");
                assert_eq!(
                    (&chunk["model"], &chunk["created"]),
                    (&"m".into(), &5.into())
                );
            }
            assert_eq!(relay.texts(0), "aa longer text", "{order:?}");
        }
    }

    #[test]
    fn a_usage_without_both_counts_is_no_report() {
        let usage = |usage: &str| {
            let up = format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"Hi\"}},\"finish_reason\":\"stop\"}}]}}\n\n\
                 data: {{\"choices\":[],\"usage\":{usage}}}\n\n"
            );
            relayed(&[up.as_bytes()], None).1.reported()
        };
        assert_eq!(usage("null"), None);
        assert_eq!(
            usage(r#"{"prompt_tokens":7}"#),
            None,
            "no completion: counted here"
        );
        assert_eq!(
            usage(r#"{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}"#),
            Some(Reported {
                prompt: 7,
                completion: 2
            })
        );
    }

    #[test]
    fn a_stream_split_anywhere_is_relayed_the_same() {
        let (whole, _) = relayed(&[UP.as_bytes()], None);
        let bytes = UP.as_bytes();
        for at in 1..bytes.len() {
            let (split, mut relay) = relayed(&[&bytes[..at], &bytes[at..]], None);
            assert_eq!(split, whole, "split at {at}");
            assert_eq!(relay.texts(0), "Hello");
        }
    }

    #[test]
    fn a_chunk_the_scan_cannot_vouch_for_is_parsed_and_relayed() {
        // An escaped key: the scan leaves it to a parser.
        let up = r#"data: {"id":"x","mod\u0065l":"up","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#;
        let (text, mut relay) = relayed(&[format!("{up}\n\n").as_bytes()], None);
        let chunks = data(&text);
        assert_eq!(chunks[0]["model"], "m", "{text}");
        assert_eq!(chunks[0]["id"], "chatcmpl-gw");
        assert_eq!(relay.texts(0), "Hi");
        // Not JSON: the stream fails there.
        let (_, mut relay) = relayed(&[b"data: {\"choices\": [\n\n"], None);
        let mut tail = Vec::new();
        let (ends, answer) = relay.end(None, Tail::default(), &mut tail);
        assert!(
            ends[0].why().unwrap().contains("invalid chunk JSON"),
            "{}",
            ends[0]
        );
        assert!(answer.failure().is_some());
    }

    #[test]
    fn an_output_past_its_bound_finishes_there_with_length() {
        let chunk = |content: &str| {
            format!(
                "data: {{\"id\":\"u\",\"model\":\"up\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}},\"finish_reason\":null}}]}}\n\n"
            )
        };
        let up: String = (0..10).map(|_| chunk(" one two three")).collect();
        let (text, mut relay) = relayed(&[up.as_bytes()], Some(7));
        let chunks = data(&text);
        // Three updates: 3, 6, then 9 words, which passes 7 and is kept whole; then the
        // gateway's finish.
        assert_eq!(chunks.len(), 4, "{text}");
        assert_eq!(chunks[3]["choices"][0]["finish_reason"], "length");
        // The upstream's first chunk opened the choice: the gateway's finish names no role.
        assert_eq!(
            chunks[3]["choices"][0]["delta"],
            serde_json::json!({}),
            "{text}"
        );
        assert_eq!(chunks[3]["model"], "m");
        assert!(relay.at_bound(0));
        assert_eq!(words(relay.texts(0)), 9);
        // Within its bound, nothing is stopped.
        let (text, relay) = relayed(&[up.as_bytes()], Some(30));
        assert_eq!(data(&text).len(), 10);
        assert!(!relay.at_bound(0) && !relay.finished());
        // 100 words in about 250 bytes an update, against 600: the first two updates are
        // kept unparsed (their bytes cannot pass it), the third's bytes pass it and the
        // three are counted (300 words), then each as it comes: the seventh passes.
        let up: String = (0..10).map(|_| chunk(&" a".repeat(100))).collect();
        let (text, mut relay) = relayed(&[up.as_bytes()], Some(600));
        let chunks = data(&text);
        assert_eq!(chunks.len(), 8, "{text}");
        assert_eq!(chunks[7]["choices"][0]["finish_reason"], "length");
        assert!(relay.at_bound(0));
        assert_eq!(words(relay.texts(0)), 700);
        // An update kept unparsed that is not a choice's (its content a number) fails the
        // answer once the updates are counted: the bound is never passed uncounted.
        let wrong = "data: {\"id\":\"u\",\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":5},\"finish_reason\":null}]}\n\n";
        let up: String = std::iter::once(wrong.to_string())
            .chain((0..9).map(|_| chunk(&" a".repeat(100))))
            .collect();
        let (text, mut relay) = relayed(&[up.as_bytes()], Some(600));
        // It and two updates fit the room unparsed; the fourth update passes it.
        assert_eq!(
            data(&text).len(),
            3,
            "relayed until the updates were counted: {text}"
        );
        let mut tail = Vec::new();
        let (ends, answer) = relay.end(None, Tail::default(), &mut tail);
        assert!(ends[0].why().unwrap().contains("invalid"), "{}", ends[0]);
        assert!(answer.failure().is_some() && !relay.at_bound(0));
    }

    #[test]
    fn an_upstreams_error_ends_the_answer_as_the_general_path_ends_it() {
        let up = concat!(
            r#"data: {"id":"u","model":"up","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            "\n\n",
            r#"data: {"error":{"message":"overloaded","type":"server_error"}}"#,
            "\n\n"
        );
        let (text, mut relay) = relayed(&[up.as_bytes()], None);
        assert_eq!(
            data(&text).len(),
            1,
            "the error is the tail's to say: {text}"
        );
        let mut tail = Vec::new();
        let (ends, answer) = relay.end(None, Tail::default(), &mut tail);
        let end = &ends[0];
        let tail = String::from_utf8(tail).unwrap();
        let events: Vec<&str> = tail.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 3, "{tail}");
        let failed: serde_json::Value =
            serde_json::from_str(events[0].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(failed["choices"][0]["finish_reason"], "error");
        assert!(end.why().unwrap().contains("overloaded"), "{end}");
        assert!(events[1].contains("\"error\"") && events[1].contains("overloaded"));
        assert_eq!(events[2], "data: [DONE]");
        assert!(answer.failure().is_some());
        // A failure after the finish is not one: the choice had finished.
        let (_, mut relay) = relayed(&[UP.as_bytes()], None);
        relay.failed("closed".into(), None);
        let (ends, _) = relay.end(None, Tail::default(), &mut Vec::new());
        assert_eq!(ends, [OutputEnd::Finished("stop".into())]);
    }

    /// A chunk of choice `index`'s element `content`, finished so if `finish` is.
    fn element(index: u32, content: &str, finish: Option<&str>) -> String {
        let finish = finish.map_or("null".to_string(), |f| format!("\"{f}\""));
        format!(
            "{{\"index\":{index},\"delta\":{{\"content\":\"{content}\"}},\"finish_reason\":{finish}}}"
        )
    }

    /// One chunk of `elements`.
    fn chunk(elements: &[String]) -> String {
        format!(
            "data: {{\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[{}]}}\n\n",
            elements.join(",")
        )
    }

    /// Each choice's text in `chunks`, by index.
    fn texts_of(chunks: &[serde_json::Value], n: usize) -> Vec<String> {
        let mut texts = vec![String::new(); n];
        for chunk in chunks {
            for choice in chunk["choices"].as_array().into_iter().flatten() {
                let i = choice["index"].as_u64().unwrap() as usize;
                texts[i].push_str(choice["delta"]["content"].as_str().unwrap_or_default());
            }
        }
        texts
    }

    #[test]
    fn several_choices_interleaved_pass_each_until_its_own_finish() {
        // Choice 1 first, with its role.
        let opening = "{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"b1\"},\"finish_reason\":null,\"x\":[1]}";
        let up = [
            chunk(&[opening.to_string()]),
            chunk(&[element(0, "a1", None)]),
            chunk(&[element(2, "c1", Some("stop"))]),
            // Choice 2 finished: its element is left out of the chunk, the others pass.
            chunk(&[
                element(2, "late", None),
                element(0, "a2", None),
                element(1, "b2", None),
            ]),
            chunk(&[element(1, "b3", Some("length"))]),
            chunk(&[element(0, "a3", None), element(1, "late", None)]),
            chunk(&[element(0, "", Some("stop"))]),
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":9}}\n\n"
                .into(),
            "data: [DONE]\n\n".into(),
        ]
        .concat();
        let whole = |reads: &[&[u8]]| relayed_n(3, reads, None);
        let (text, mut relay) = whole(&[up.as_bytes()]);
        let chunks = data(&text);
        // The gateway's three openings, in index order, then the upstream's seven chunks.
        assert_eq!(chunks.len(), 10, "{text}");
        for (i, opening) in chunks[..3].iter().enumerate() {
            let choice = &opening["choices"][0];
            assert_eq!(
                (&choice["index"], &choice["delta"]["role"]),
                (&i.into(), &"assistant".into())
            );
        }
        // The upstream's role is the openings' to say; the rest of its element passes.
        let roles = (chunks[3..].iter()).filter(|c| c["choices"][0]["delta"]["role"].is_string());
        assert_eq!(roles.count(), 0, "{text}");
        assert_eq!(chunks[3]["choices"][0]["x"][0], 1, "{text}");
        // The rest of it as it came, in its order.
        assert!(
            text.contains(r#"{"index":1,"delta":{"content":"b1"},"finish_reason":null,"x":[1]}"#),
            "{text}"
        );
        assert_eq!(texts_of(&chunks, 3), ["a1a2a3", "b1b2b3", "c1"], "{text}");
        assert_eq!(chunks[6]["choices"].as_array().unwrap().len(), 2, "{text}");
        assert_eq!(chunks[6]["choices"][0]["index"], 0);
        assert_eq!(relay.after_finish(), 2);
        assert!(relay.finished() && relay.closed());
        assert_eq!(
            (0..3)
                .map(|i| relay.texts(i).to_string())
                .collect::<Vec<_>>(),
            ["a1a2a3", "b1b2b3", "c1"]
        );
        // The order of the finishes: 2, then 1, then 0.
        assert_eq!(
            (0..3).map(|i| relay.place(i)).collect::<Vec<_>>(),
            [Some(2), Some(1), Some(0)]
        );
        assert_eq!(relay.finish(1), Some("length"));
        assert_eq!(
            relay.reported(),
            Some(Reported {
                prompt: 4,
                completion: 9
            })
        );
        let mut tail = Vec::new();
        let (ends, answer) = relay.end(None, Tail::default(), &mut tail);
        assert!(
            ends.iter().all(|e| matches!(e, OutputEnd::Finished(_))),
            "{ends:?}"
        );
        assert!(answer.failure().is_none());
        // Split anywhere, the same.
        let bytes = up.as_bytes();
        for at in (1..bytes.len()).step_by(7) {
            let (split, _) = whole(&[&bytes[..at], &bytes[at..]]);
            assert_eq!(split, text, "split at {at}");
        }
    }

    #[test]
    fn each_choice_is_held_to_its_own_bound_and_fails_alone() {
        // Choice 0 passes its bound of 4 words; choice 1 goes on and finishes.
        let up = [
            chunk(&[element(0, " one two three", None), element(1, " one", None)]),
            chunk(&[element(0, " four five", None), element(1, " two", None)]),
            chunk(&[element(0, " six", None), element(1, " three", Some("stop"))]),
        ]
        .concat();
        let (text, relay) = relayed_n(2, &[up.as_bytes()], Some(4));
        let chunks = &data(&text)[2..];
        // The bound's finish is written after the chunk that passed it; choice 0's next
        // element is left out, and with both choices closed the upstream is let go.
        assert_eq!(chunks.len(), 4, "{text}");
        assert_eq!(chunks[2]["choices"][0]["finish_reason"], "length", "{text}");
        assert_eq!(chunks[2]["choices"][0]["index"], 0);
        assert_eq!(chunks[3]["choices"].as_array().unwrap().len(), 1, "{text}");
        assert!(relay.at_bound(0) && !relay.at_bound(1));
        assert_eq!(relay.finish(1), Some("stop"));
        // An update of choice 1 that is not one fails it alone; choice 0 finishes.
        let wrong =
            "{\"index\":1,\"delta\":{\"content\":5},\"finish_reason\":\"stop\"}".to_string();
        let up = [
            chunk(&[element(0, "a", None), element(1, "b", None)]),
            chunk(&[element(0, "c", None), wrong]),
            chunk(&[element(1, "late", None), element(0, "d", Some("stop"))]),
        ]
        .concat();
        let (text, mut relay) = relayed_n(2, &[up.as_bytes()], None);
        let chunks = data(&text);
        assert_eq!(texts_of(&chunks, 2), ["acd", "b"], "{text}");
        let mut tail = Vec::new();
        let (ends, answer) = relay.end(None, Tail::default(), &mut tail);
        assert_eq!(ends[0], OutputEnd::Finished("stop".into()));
        assert!(ends[1].why().unwrap().contains("invalid"), "{}", ends[1]);
        assert!(answer.failure().is_none(), "one choice finished");
        let tail = String::from_utf8(tail).unwrap();
        assert!(
            tail.contains("\"index\":1") && tail.contains("\"finish_reason\":\"error\""),
            "{tail}"
        );
        // A choice past its bytes fails alone, as the general path's `max_choice_bytes`.
        let long = "x".repeat(100);
        let up = [
            chunk(&[element(0, &long, None), element(1, "b", None)]),
            chunk(&[element(0, &long, None), element(1, "c", Some("stop"))]),
            chunk(&[element(0, "late", Some("stop"))]),
        ]
        .concat();
        let (text, mut relay) = relayed_within(2, &[up.as_bytes()], None, 200);
        let chunks = data(&text);
        assert_eq!(
            texts_of(&chunks, 2),
            [long.clone(), "bc".to_string()],
            "{text}"
        );
        let (ends, answer) = relay.end(None, Tail::default(), &mut Vec::new());
        assert!(
            ends[0].why().unwrap().contains("max_choice_bytes"),
            "{}",
            ends[0]
        );
        assert_eq!(ends[1], OutputEnd::Finished("stop".into()));
        assert!(answer.failure().is_none());
    }

    #[test]
    fn a_stream_that_fails_fails_only_the_choices_still_open() {
        let up = [
            chunk(&[element(0, "a", Some("stop")), element(1, "b", None)]),
            "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n".into(),
        ]
        .concat();
        let (_, mut relay) = relayed_n(2, &[up.as_bytes()], None);
        let (ends, answer) = relay.end(None, Tail::default(), &mut Vec::new());
        assert_eq!(ends[0], OutputEnd::Finished("stop".into()));
        assert!(ends[1].why().unwrap().contains("overloaded"), "{}", ends[1]);
        assert!(answer.failure().is_none());
        // A choice index past those asked fails the stream there.
        let up = chunk(&[element(0, "a", None), element(3, "d", None)]);
        let (text, mut relay) = relayed_n(2, &[up.as_bytes()], None);
        assert_eq!(data(&text).len(), 2, "the openings alone: {text}");
        let (ends, answer) = relay.end(None, Tail::default(), &mut Vec::new());
        assert!(
            ends[0].why().unwrap().contains("past the 2 choices"),
            "{}",
            ends[0]
        );
        assert!(answer.failure().is_some());
    }

    #[test]
    fn texts_read_unparsed_are_those_a_parse_reads() {
        // Sole texts with and without escapes, an opening, several members, a call.
        let elements = [
            r#"{"index":0,"delta":{"role":"assistant"},"finish_reason":null}"#,
            r#"{"index":0,"delta":{"content":"plain "},"finish_reason":null}"#,
            r#"{"index":0,"delta":{"content":"\"quoted\" \u00e9 "},"finish_reason":null}"#,
            r#"{"index":0,"delta":{"reasoning_content":"think "},"finish_reason":null}"#,
            r#"{"index":0,"delta":{"refusal":"no "}}"#,
            r#"{"index":0,"delta":{"content":"a","reasoning":"b "}}"#,
            r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}"#,
            r#"{"index":0,"delta":{"other":"not text"}}"#,
        ];
        let up: String = (elements.iter())
            .map(|e| format!("data: {{\"choices\":[{e}]}}\n\n"))
            .collect();
        let mut parsed = String::new();
        for element in elements {
            let choice: Choice = serde_json::from_str(element).unwrap();
            let mut lane =
                ChatRelay::new(&envelope(), 1, (false, false), None, (1 << 20, usize::MAX))
                    .state
                    .lanes
                    .remove(0);
            lane.take(&choice);
            parsed.push_str(&lane.texts);
        }
        assert_eq!(parsed, "plain \"quoted\" é think no ab {}");
        let (_, mut relay) = relayed(&[up.as_bytes()], None);
        assert_eq!(relay.texts(0), parsed);
        // Of several choices, read as they come: the same.
        let (_, mut relay) = relayed_n(2, &[up.as_bytes()], None);
        assert_eq!(relay.texts(0), parsed);
        // An element that is not a choice's ends the texts there, as a parse would.
        let wrong = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":5}}]}\n\n";
        let up = format!(
            "{}{wrong}{}",
            &up, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"}}]}\n\n"
        );
        let (_, mut relay) = relayed(&[up.as_bytes()], None);
        assert_eq!(relay.texts(0), parsed);
        let (_, mut relay) = relayed_n(2, &[up.as_bytes()], None);
        assert_eq!(relay.texts(0), parsed);
    }
}
