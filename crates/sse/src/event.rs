//! Dispatched events, borrowed and owned.

/// One dispatched server-sent event, borrowed from the framer's buffers (or
/// from the bytes just fed).
///
/// It is only valid inside the `on_event` callback of
/// [`Framer::feed`](crate::Framer::feed); call [`Event::to_owned`] to keep it.
///
/// ```
/// use choicewise_sse::{Event, Framer};
/// use std::ops::ControlFlow;
///
/// let mut framer = Framer::new();
/// let mut seen = Vec::new();
/// framer
///     .feed(b"id: 7\nevent: delta\ndata: a\ndata: b\nretry: 500\n\n", |ev: Event<'_>| {
///         assert_eq!(ev.event, "delta");
///         assert_eq!(ev.data, "a\nb");
///         assert_eq!(ev.id, Some("7"));
///         assert_eq!(ev.retry, Some(500));
///         assert_eq!((ev.line, ev.offset), (1, 0));
///         seen.push(ev.to_owned());
///         ControlFlow::Continue(())
///     })
///     .unwrap();
/// assert_eq!(seen.len(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Event<'a> {
    /// Value of the last `event:` field of this event; `""` if there was none,
    /// which means the default type `"message"` (see [`Event::event_type`]).
    pub event: &'a str,
    /// The values of the event's `data:` fields joined with `'\n'` (no trailing
    /// newline). May be empty (a lone `data:` line dispatches an event with
    /// empty data).
    pub data: &'a str,
    /// The last event ID in force when the event was dispatched. As in the
    /// WHATWG rules it persists across events until another `id:` field changes
    /// it; an `id:` value containing NUL is ignored. `None` when the last event
    /// ID is empty (never set, or reset by an empty `id:` field).
    pub id: Option<&'a str>,
    /// The value of this event's last valid `retry:` field (ASCII digits only,
    /// fitting in a `u64`), if any.
    pub retry: Option<u64>,
    /// 1-based line number of the event's first field line.
    pub line: u64,
    /// Byte offset (from the start of the stream, a BOM included) of the
    /// event's first field line.
    pub offset: u64,
    /// The line numbers of the event's `data:` lines (other fields and comments
    /// may stand between them), to point at a line inside `data`.
    pub data_lines: DataLines<'a>,
}

/// The line numbers of an event's `data:` lines: [`DataLines::line`] maps the
/// k-th line of [`Event::data`] to its line in the stream. Kept as runs of
/// consecutive lines, at most 64 runs per event (past that, later data lines
/// are taken as consecutive).
///
/// ```
/// use choicewise_sse::Framer;
/// use std::ops::ControlFlow;
///
/// let mut lines = Vec::new();
/// Framer::new().feed(b"id: 1\ndata: {\n: note\ndata: }\n\n", |ev| {
///     lines = (0..2).map(|k| ev.data_lines.line(k)).collect();
///     ControlFlow::Continue(())
/// }).unwrap();
/// assert_eq!(lines, [Some(2), Some(4)]);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DataLines<'a> {
    pub(crate) runs: &'a [(u64, u32)],
}

impl DataLines<'_> {
    /// The stream line of the event's `k`-th data line (0-based), if known.
    ///
    /// ```
    /// use choicewise_sse::DataLines;
    /// assert_eq!(DataLines::default().line(0), None);
    /// ```
    pub fn line(&self, k: usize) -> Option<u64> {
        let k = u32::try_from(k).ok()?;
        let run = self.runs.iter().rev().find(|(_, first)| *first <= k)?;
        Some(run.0 + u64::from(k - run.1))
    }
}

impl<'a> Event<'a> {
    /// The event type with the WHATWG default applied: [`Event::event`], or
    /// `"message"` when it is empty.
    ///
    /// ```
    /// use choicewise_sse::Event;
    ///
    /// let ev = Event { event: "", data: "x", id: None, retry: None, line: 1, offset: 0, data_lines: Default::default() };
    /// assert_eq!(ev.event_type(), "message");
    /// let ev = Event { event: "ping", ..ev };
    /// assert_eq!(ev.event_type(), "ping");
    /// ```
    pub fn event_type(&self) -> &'a str {
        if self.event.is_empty() {
            "message"
        } else {
            self.event
        }
    }

    /// Copies the event out of the framer's buffers.
    ///
    /// ```
    /// use choicewise_sse::{Event, OwnedEvent};
    ///
    /// let ev = Event { event: "", data: "x", id: Some("1"), retry: None, line: 3, offset: 10, data_lines: Default::default() };
    /// let owned: OwnedEvent = ev.to_owned();
    /// assert_eq!(owned.data, "x");
    /// assert_eq!(owned.as_event(), ev);
    /// ```
    #[allow(clippy::wrong_self_convention)]
    pub fn to_owned(&self) -> OwnedEvent {
        OwnedEvent {
            event: self.event.to_owned(),
            data: self.data.to_owned(),
            id: self.id.map(str::to_owned),
            retry: self.retry,
            line: self.line,
            offset: self.offset,
        }
    }
}

/// The owned twin of [`Event`], for keeping an event past the callback.
///
/// ```
/// use choicewise_sse::{Framer, OwnedEvent};
/// use std::ops::ControlFlow;
///
/// let mut framer = Framer::new();
/// let mut events: Vec<OwnedEvent> = Vec::new();
/// framer
///     .feed(b"data: one\n\ndata: two\n\n", |ev| {
///         events.push(ev.into());
///         ControlFlow::Continue(())
///     })
///     .unwrap();
/// assert_eq!(events[1].data, "two");
/// assert_eq!((events[1].line, events[1].offset), (3, 11));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct OwnedEvent {
    /// See [`Event::event`].
    pub event: String,
    /// See [`Event::data`].
    pub data: String,
    /// See [`Event::id`].
    pub id: Option<String>,
    /// See [`Event::retry`].
    pub retry: Option<u64>,
    /// See [`Event::line`].
    pub line: u64,
    /// See [`Event::offset`].
    pub offset: u64,
}

impl OwnedEvent {
    /// Borrows the owned event as an [`Event`].
    ///
    /// ```
    /// use choicewise_sse::OwnedEvent;
    ///
    /// let owned = OwnedEvent { data: "x".into(), ..OwnedEvent::default() };
    /// assert_eq!(owned.as_event().event_type(), "message");
    /// ```
    pub fn as_event(&self) -> Event<'_> {
        Event {
            event: &self.event,
            data: &self.data,
            id: self.id.as_deref(),
            retry: self.retry,
            line: self.line,
            offset: self.offset,
            data_lines: DataLines::default(),
        }
    }
}

impl From<Event<'_>> for OwnedEvent {
    fn from(ev: Event<'_>) -> Self {
        ev.to_owned()
    }
}
