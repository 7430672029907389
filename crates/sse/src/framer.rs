//! The incremental framer.

use std::fmt;
use std::ops::ControlFlow;

use memchr::memchr2;

use crate::{Event, SseError};

mod fields;
mod report;
use fields::ObjectScan;
pub use report::{Feed, Position, Tail};

/// The default maximum event size of [`Framer::new`]: 8 MiB.
///
/// ```
/// use choicewise_sse::{Framer, DEFAULT_MAX_EVENT_SIZE};
///
/// assert_eq!(Framer::new().max_event_size(), DEFAULT_MAX_EVENT_SIZE);
/// ```
pub const DEFAULT_MAX_EVENT_SIZE: usize = 8 * 1024 * 1024;

/// The default maximum number of field lines in one event of [`Framer::new`]: 65,536.
///
/// Comment lines and blank lines do not count; every other line of the pending event does.
///
/// ```
/// use choicewise_sse::{Framer, DEFAULT_MAX_EVENT_LINES};
///
/// assert_eq!(Framer::new().max_event_lines(), DEFAULT_MAX_EVENT_LINES);
/// ```
pub const DEFAULT_MAX_EVENT_LINES: u32 = 65_536;

/// The UTF-8 byte-order mark, skipped at the very start of a stream.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Incremental, synchronous server-sent-events framer following the WHATWG
/// "event stream interpretation" rules.
///
/// Feed it the stream's bytes as they arrive, in pieces of any size, with
/// [`Framer::feed`]; it calls back with each complete [`Event`], borrowed from
/// its internal buffers (no per-event allocation once the buffers have grown).
/// At the end of the stream call [`Framer::finish`] to learn what was left
/// undispatched.
///
/// Memory is bounded: the pending event's data plus the line being read may
/// not exceed the maximum event size ([`SseError::EventTooLarge`]), checked as
/// bytes arrive. [`Framer::buffered_bytes`] reports the heap held.
///
/// ```
/// use choicewise_sse::Framer;
/// use std::ops::ControlFlow;
///
/// let mut framer = Framer::new();
/// let mut data = Vec::new();
/// for read in [&b"data: hel"[..], b"lo\r", b"\n\r\ndata: x\n"] {
///     framer
///         .feed(read, |ev| {
///             data.push(ev.data.to_owned());
///             ControlFlow::Continue(())
///         })
///         .unwrap();
/// }
/// assert_eq!(data, ["hello"]);
/// assert_eq!(framer.finish().pending_data.as_deref(), Some("x"));
/// ```
pub struct Framer {
    /// The line being read, when it spans reads (otherwise lines are borrowed
    /// from the input).
    line_buf: Vec<u8>,
    /// Interpretation state of the event being assembled.
    st: State,
    /// `Some(n)`: still at the start of the stream with `n` bytes of a BOM
    /// matched; `None`: past the start.
    bom: Option<u8>,
    /// The previous read ended with a CR: an LF at the start of the next read
    /// belongs to the same line end.
    pending_cr: bool,
    /// 1-based number of the line being read.
    line_no: u64,
    /// Stream offset where the line being read starts.
    line_start: u64,
    /// Bytes consumed so far.
    offset: u64,
    /// The error returned earlier, if any.
    poisoned: Option<SseError>,
}

/// Field interpretation state, split from the line buffer so a buffered line
/// can be interpreted while borrowed.
struct State {
    max: usize,
    /// The most field lines one event may have.
    max_lines: u32,
    /// Field lines of the pending event so far.
    field_lines: u32,
    /// Whether `data` is complete JSON objects, brought up to date when asked.
    objects: ObjectScan,
    data: String,
    has_data: bool,
    /// Runs of consecutive data lines of the pending event: (first line, first data line
    /// index); at most `MAX_DATA_RUNS`.
    data_runs: Vec<(u64, u32)>,
    /// Data lines of the pending event so far.
    data_count: u32,
    event_type: String,
    last_id: String,
    retry: Option<u64>,
    reconnection_time: Option<u64>,
    /// (line, offset) of the pending event's first field line.
    event_start: Option<(u64, u64)>,
    /// WHATWG only: never dispatch without a blank line.
    strict: bool,
    /// Events dispatched without their blank line (tolerant mode), and the line of the first.
    unterminated: u64,
    first_unterminated: Option<u64>,
}

impl Default for Framer {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Framer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Framer")
            .field("max_event_size", &self.st.max)
            .field("position", &self.position())
            .field("partial_line_len", &self.line_buf.len())
            .field("pending_data_len", &self.st.data.len())
            .field("has_data", &self.st.has_data)
            .field("event_type", &self.st.event_type)
            .field("last_event_id", &self.st.last_id)
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

impl Framer {
    /// A framer with the [`DEFAULT_MAX_EVENT_SIZE`] limit.
    ///
    /// ```
    /// use choicewise_sse::Framer;
    ///
    /// let framer = Framer::new();
    /// assert_eq!(framer.position().line, 1);
    /// ```
    pub fn new() -> Self {
        Self::with_max_event_size(DEFAULT_MAX_EVENT_SIZE)
    }

    /// A framer refusing events larger than `max` bytes (pending data plus the
    /// raw line being read, see [`SseError::EventTooLarge`]).
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::with_max_event_size(1024);
    /// assert!(framer.feed(&[b'x'; 2000], |_| ControlFlow::Continue(())).is_err());
    /// ```
    pub fn with_max_event_size(max: usize) -> Self {
        Framer {
            line_buf: Vec::new(),
            st: State {
                max,
                max_lines: DEFAULT_MAX_EVENT_LINES,
                field_lines: 0,
                objects: ObjectScan::default(),
                data: String::new(),
                has_data: false,
                data_runs: Vec::new(),
                data_count: 0,
                event_type: String::new(),
                last_id: String::new(),
                retry: None,
                reconnection_time: None,
                event_start: None,
                strict: false,
                unterminated: 0,
                first_unterminated: None,
            },
            bom: Some(0),
            pending_cr: false,
            line_no: 1,
            line_start: 0,
            offset: 0,
            poisoned: None,
        }
    }

    /// Strict WHATWG framing (`true`), or the default tolerant mode (`false`).
    ///
    /// Some servers (hand-rolled ones, editors' test recordings) write one `data:` line per
    /// event **without the blank line** between events. WHATWG joins such lines into one event
    /// that is only dispatched at the next blank line, or never. In the tolerant mode, when a
    /// `data:` line arrives while the pending event's data is one or more complete JSON
    /// objects, or `[DONE]`, the pending event is dispatched first, as if the blank line had
    /// been there; [`finish_with`](Self::finish_with) does the same at the end of the stream.
    /// [`unterminated_events`](Self::unterminated_events) counts these dispatches, so the
    /// caller can warn. A stream with its blank lines frames the same in both modes; so does
    /// an event whose data lines only together form a JSON value.
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// use std::ops::ControlFlow;
    ///
    /// let input = b"data: {\"a\":1}\ndata: {\"b\":2}\ndata: [DONE]\n";
    /// let frame = |mut framer: Framer| {
    ///     let mut events = Vec::new();
    ///     framer.feed(input, |ev| { events.push(ev.data.to_owned()); ControlFlow::Continue(()) }).unwrap();
    ///     (events, framer.unterminated_events(), framer.finish().pending_data)
    /// };
    /// let (events, unterminated, pending) = frame(Framer::new());
    /// assert_eq!(events, ["{\"a\":1}", "{\"b\":2}"]);
    /// assert_eq!((unterminated, pending.as_deref()), (2, Some("[DONE]")));
    /// let (events, unterminated, pending) = frame(Framer::new().strict(true));
    /// assert!(events.is_empty());
    /// assert_eq!((unterminated, pending.as_deref()), (0, Some("{\"a\":1}\n{\"b\":2}\n[DONE]")));
    /// ```
    pub fn strict(mut self, strict: bool) -> Self {
        self.st.strict = strict;
        self
    }

    /// Whether the framer is in strict WHATWG mode (see [`strict`](Self::strict)).
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// assert!(!Framer::new().is_strict());
    /// ```
    pub fn is_strict(&self) -> bool {
        self.st.strict
    }

    /// How many events the tolerant mode dispatched without their blank line so far (see
    /// [`strict`](Self::strict)); reset by [`finish`](Self::finish).
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::new();
    /// framer.feed(b"data: {}\n\ndata: {}\ndata: {}\n", |_| ControlFlow::Continue(())).unwrap();
    /// assert_eq!(framer.unterminated_events(), 1);
    /// assert_eq!(framer.first_unterminated_line(), Some(3));
    /// ```
    pub fn unterminated_events(&self) -> u64 {
        self.st.unterminated
    }

    /// The first line of the first event dispatched without its blank line, if any (see
    /// [`unterminated_events`](Self::unterminated_events)).
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// use std::ops::ControlFlow;
    /// let mut framer = Framer::new();
    /// framer.feed(b"data: {}\n\n", |_| ControlFlow::Continue(())).unwrap();
    /// assert_eq!(framer.first_unterminated_line(), None);
    /// ```
    pub fn first_unterminated_line(&self) -> Option<u64> {
        self.st.first_unterminated
    }

    /// Ends the stream like [`finish`](Self::finish), but in the tolerant mode, when the
    /// stream already had events without their blank line, first dispatches a pending event
    /// whose lines are complete and whose data is one or more complete JSON objects: the last
    /// event of such a stream. Otherwise the pending event stays undispatched, as WHATWG says:
    /// in a stream that has its blank lines, a missing last one means the stream was cut. A
    /// pending `[DONE]` is left in the [`Tail`], as [`finish`](Self::finish) leaves it.
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::new();
    /// framer.feed(b"data: {\"a\":1}\ndata: {\"a\":2}\n", |_| ControlFlow::Continue(())).unwrap();
    /// let mut last = None;
    /// let tail = framer.finish_with(|ev| { last = Some(ev.data.to_owned()); ControlFlow::Continue(()) });
    /// assert_eq!(last.as_deref(), Some("{\"a\":2}"));
    /// assert!(tail.is_clean());
    ///
    /// // Blank lines until the cut: the last event is not taken.
    /// framer.feed(b"data: {\"a\":1}\n\ndata: {\"a\":2}\n", |_| ControlFlow::Continue(())).unwrap();
    /// let tail = framer.finish_with(|_| panic!("not dispatched"));
    /// assert_eq!(tail.pending_data.as_deref(), Some("{\"a\":2}"));
    /// ```
    pub fn finish_with<F>(&mut self, mut on_event: F) -> Tail
    where
        F: FnMut(Event<'_>) -> ControlFlow<()>,
    {
        let has_partial = self.offset > self.line_start;
        if !self.st.strict
            && self.st.unterminated > 0
            && self.poisoned.is_none()
            && !has_partial
            && self.st.has_data
            && {
                self.st.objects.catch_up(&self.st.data);
                self.st.objects.complete()
            }
        {
            let line = self.st.event_start.map_or(self.line_no, |(l, _)| l);
            self.st.note_unterminated(line);
            let _ = self.st.dispatch(&mut on_event);
        }
        self.finish()
    }

    /// A framer refusing events of more than `lines` field lines
    /// ([`SseError::TooManyLines`]); [`DEFAULT_MAX_EVENT_LINES`] by default. Comment lines
    /// do not count. Framing costs time linear in the bytes whatever the limit: it bounds
    /// what one event may carry, not the work.
    ///
    /// ```
    /// use choicewise_sse::{Framer, SseError};
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::new().max_lines(3);
    /// let err = framer.feed(b"data:\ndata:\ndata:\ndata:\n\n", |_| ControlFlow::Continue(()));
    /// assert_eq!(err, Err(SseError::TooManyLines { limit: 3, line: 1, offset: 0 }));
    /// ```
    pub fn max_lines(mut self, lines: u32) -> Self {
        self.st.max_lines = lines;
        self
    }

    /// The maximum number of field lines per event this framer enforces.
    ///
    /// ```
    /// use choicewise_sse::Framer;
    ///
    /// assert_eq!(Framer::new().max_lines(10).max_event_lines(), 10);
    /// ```
    pub fn max_event_lines(&self) -> u32 {
        self.st.max_lines
    }

    /// The maximum event size this framer enforces.
    ///
    /// ```
    /// use choicewise_sse::Framer;
    ///
    /// assert_eq!(Framer::with_max_event_size(10).max_event_size(), 10);
    /// ```
    pub fn max_event_size(&self) -> usize {
        self.st.max
    }

    /// Feeds the next read of the stream; calls `on_event` for each event
    /// completed by it, in order.
    ///
    /// Reads may be split anywhere: inside a line, between a CR and its LF,
    /// inside a multi-byte UTF-8 character or inside the initial BOM.
    ///
    /// If `on_event` returns [`ControlFlow::Break`], feeding stops right after
    /// the line that dispatched that event and [`Feed::Stopped`] tells how many
    /// bytes of `bytes` were consumed; otherwise [`Feed::Consumed`] is
    /// returned.
    ///
    /// # Errors
    ///
    /// [`SseError::EventTooLarge`], [`SseError::TooManyLines`] or [`SseError::InvalidUtf8`]; events
    /// completed before the offending line have been delivered. The framer is
    /// then poisoned: every later call returns the same error until
    /// [`Framer::finish`] resets it.
    ///
    /// ```
    /// use choicewise_sse::{Feed, Framer};
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::new();
    /// let mut events = Vec::new();
    /// for read in [&b"event: delta\ndata: {\"a\""[..], b":1}\n", b"\n: keep-alive\n"] {
    ///     let feed = framer.feed(read, |ev| {
    ///         events.push((ev.event.to_owned(), ev.data.to_owned()));
    ///         ControlFlow::Continue(())
    ///     });
    ///     assert_eq!(feed, Ok(Feed::Consumed));
    /// }
    /// assert_eq!(events, [("delta".to_owned(), "{\"a\":1}".to_owned())]);
    /// ```
    pub fn feed<F>(&mut self, bytes: &[u8], mut on_event: F) -> Result<Feed, SseError>
    where
        F: FnMut(Event<'_>) -> ControlFlow<()>,
    {
        if let Some(err) = &self.poisoned {
            return Err(err.clone());
        }
        let result = self.feed_inner(bytes, &mut on_event);
        if let Err(err) = &result {
            self.poisoned = Some(err.clone());
        }
        result
    }

    fn feed_inner<F>(&mut self, bytes: &[u8], on_event: &mut F) -> Result<Feed, SseError>
    where
        F: FnMut(Event<'_>) -> ControlFlow<()>,
    {
        let base = self.offset;
        let mut pos = 0usize;

        if let Some(mut matched) = self.bom {
            loop {
                if matched == 3 {
                    self.bom = None;
                    self.line_start = base + pos as u64;
                    break;
                }
                match bytes.get(pos) {
                    None => {
                        self.bom = Some(matched);
                        self.offset = base + pos as u64;
                        return Ok(Feed::Consumed);
                    }
                    Some(&b) if b == BOM[matched as usize] => {
                        matched += 1;
                        pos += 1;
                    }
                    Some(_) => {
                        // Not a BOM: the bytes matched so far start line 1.
                        self.bom = None;
                        self.offset = base + pos as u64;
                        self.append_partial(&BOM[..matched as usize])?;
                        break;
                    }
                }
            }
        }

        if self.pending_cr
            && let Some(&b) = bytes.get(pos)
        {
            self.pending_cr = false;
            if b == b'\n' {
                pos += 1;
                self.line_start = base + pos as u64;
            }
        }

        loop {
            let rest = &bytes[pos..];
            let Some(i) = memchr2(b'\n', b'\r', rest) else {
                self.offset = base + pos as u64;
                if !rest.is_empty() {
                    self.append_partial(rest)?;
                    self.offset = base + bytes.len() as u64;
                }
                return Ok(Feed::Consumed);
            };
            let end = pos + i;
            let mut next = end + 1;
            if bytes[end] == b'\r' {
                match bytes.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
            let flow = if self.line_buf.is_empty() {
                self.st
                    .line(&bytes[pos..end], self.line_no, self.line_start, on_event)
            } else {
                self.offset = base + pos as u64;
                self.append_partial(&bytes[pos..end])?;
                let flow = self
                    .st
                    .line(&self.line_buf, self.line_no, self.line_start, on_event);
                self.line_buf.clear();
                flow
            };
            pos = next;
            let flow = match flow {
                Ok(flow) => flow,
                Err(err) => {
                    self.offset = self.line_start;
                    return Err(err);
                }
            };
            self.line_no += 1;
            self.line_start = base + pos as u64;
            if flow.is_break() {
                self.offset = self.line_start;
                return Ok(Feed::Stopped { consumed: pos });
            }
        }
    }

    /// Appends part of a line that spans reads to the line buffer, enforcing
    /// the size limit before buffering anything.
    fn append_partial(&mut self, part: &[u8]) -> Result<(), SseError> {
        let len = self.line_buf.len() + part.len();
        if self.st.data.len() + len > self.st.max {
            let (line, offset) = self
                .st
                .event_start
                .unwrap_or((self.line_no, self.line_start));
            return Err(SseError::EventTooLarge {
                limit: self.st.max,
                line,
                offset,
            });
        }
        if len > self.line_buf.capacity() {
            let cap = self
                .line_buf
                .capacity()
                .saturating_mul(2)
                .max(len)
                .min(self.st.max.max(len));
            self.line_buf.reserve_exact(cap - self.line_buf.len());
        }
        self.line_buf.extend_from_slice(part);
        Ok(())
    }

    /// Ends the stream: discards (WHATWG) and reports what was left
    /// undispatched, then resets the framer for a new stream.
    ///
    /// The pending event is *not* dispatched; see [`Tail`] for how to tell a
    /// clean end from a truncated one. After `finish` the framer behaves like
    /// a new one with the same maximum event size (line 1, offset 0, BOM
    /// skipping on, no last event ID, not poisoned), but keeps its buffers'
    /// capacity.
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::new();
    /// framer.feed(b"data: a\n\n", |_| ControlFlow::Continue(())).unwrap();
    /// assert!(framer.finish().is_clean());
    /// assert_eq!(framer.position().offset, 0);
    /// ```
    pub fn finish(&mut self) -> Tail {
        let has_partial = self.offset > self.line_start;
        let start = match self.st.event_start {
            Some(start) => Some(start),
            None if has_partial => Some((self.line_no, self.line_start)),
            None => None,
        };
        let tail = match start {
            Some((line, offset)) => Tail {
                pending_bytes: self.offset.saturating_sub(offset),
                pending_data: self.st.has_data.then(|| self.st.data.clone()),
                partial_line: match self.bom {
                    Some(matched) => BOM[..matched as usize].to_vec(),
                    None if has_partial => self.line_buf.clone(),
                    None => Vec::new(),
                },
                line,
                offset,
                complete_lines: !has_partial,
            },
            None => Tail {
                pending_bytes: 0,
                pending_data: None,
                partial_line: Vec::new(),
                line: self.line_no,
                offset: self.offset,
                complete_lines: true,
            },
        };
        self.reset();
        tail
    }

    fn reset(&mut self) {
        self.line_buf.clear();
        let st = &mut self.st;
        st.data.clear();
        st.has_data = false;
        st.data_runs.clear();
        st.data_count = 0;
        st.objects = ObjectScan::default();
        st.field_lines = 0;
        st.event_type.clear();
        st.last_id.clear();
        st.retry = None;
        st.reconnection_time = None;
        st.event_start = None;
        st.unterminated = 0;
        st.first_unterminated = None;
        self.bom = Some(0);
        self.pending_cr = false;
        self.line_no = 1;
        self.line_start = 0;
        self.offset = 0;
        self.poisoned = None;
    }

    /// The 1-based number of the line currently being read, and the number of
    /// bytes consumed so far.
    ///
    /// After an error, the position is somewhere inside the offending line;
    /// the error itself carries the exact line and offset.
    ///
    /// ```
    /// use choicewise_sse::{Framer, Position};
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::new();
    /// framer.feed(b"\xEF\xBB\xBFdata: a\n", |_| ControlFlow::Continue(())).unwrap();
    /// assert_eq!(framer.position(), Position { line: 2, offset: 11 });
    /// ```
    pub fn position(&self) -> Position {
        Position {
            line: self.line_no,
            offset: self.offset,
        }
    }

    /// The last event ID in force (see [`Event::id`]), `None` while empty.
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::new();
    /// framer.feed(b"id: 42\n", |_| ControlFlow::Continue(())).unwrap();
    /// assert_eq!(framer.last_event_id(), Some("42"));
    /// ```
    pub fn last_event_id(&self) -> Option<&str> {
        (!self.st.last_id.is_empty()).then_some(self.st.last_id.as_str())
    }

    /// The stream's reconnection time: the last valid `retry:` value seen,
    /// whether or not its event was dispatched (WHATWG applies it at once).
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::new();
    /// framer.feed(b"retry: 3000\n\n", |_| ControlFlow::Continue(())).unwrap();
    /// assert_eq!(framer.reconnection_time(), Some(3000));
    /// ```
    pub fn reconnection_time(&self) -> Option<u64> {
        self.st.reconnection_time
    }

    /// Gives back the memory of the scratch buffers when nothing is pending (no partial line,
    /// no event being assembled): for a stream that may stay quiet a long time. The next
    /// event allocates them again. Returns whether they were released.
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::new();
    /// framer.feed(b"data: a fairly long event\n\n", |_| ControlFlow::Continue(())).unwrap();
    /// assert!(framer.release_idle_buffers());
    /// assert_eq!(framer.buffered_bytes(), 0);
    /// framer.feed(b"data: half", |_| ControlFlow::Continue(())).unwrap();
    /// assert!(!framer.release_idle_buffers());
    /// ```
    pub fn release_idle_buffers(&mut self) -> bool {
        let st = &self.st;
        let pending = st.has_data || !st.data.is_empty() || !st.event_type.is_empty();
        if !self.line_buf.is_empty() || pending || st.event_start.is_some() {
            return false;
        }
        self.line_buf = Vec::new();
        self.st.data = String::new();
        self.st.data_runs = Vec::new();
        self.st.event_type = String::new();
        true
    }

    /// The heap memory held by the framer's buffers (their capacity), in
    /// bytes.
    ///
    /// The line buffer and the data buffer each stay within the maximum event
    /// size, and their contents together too, so a runaway line never makes
    /// the framer hold much more than the maximum event size.
    ///
    /// ```
    /// use choicewise_sse::Framer;
    /// use std::ops::ControlFlow;
    ///
    /// let mut framer = Framer::with_max_event_size(4096);
    /// for _ in 0..100 {
    ///     let _ = framer.feed(&[b'x'; 1000], |_| ControlFlow::Continue(()));
    /// }
    /// assert!(framer.buffered_bytes() <= 4096);
    /// ```
    pub fn buffered_bytes(&self) -> usize {
        self.line_buf.capacity()
            + self.st.data.capacity()
            + self.st.event_type.capacity()
            + self.st.last_id.capacity()
    }
}
