//! What the framer tells its caller: how a call to [`Framer::feed`] ended ([`Feed`]), where
//! it is in the stream ([`Position`]), and what the end of the stream left undispatched
//! ([`Tail`]).

#[cfg(doc)]
use std::ops::ControlFlow;

#[cfg(doc)]
use super::Framer;

/// How a call to [`Framer::feed`] ended.
///
/// ```
/// use choicewise_sse::{Feed, Framer};
/// use std::ops::ControlFlow;
///
/// let mut framer = Framer::new();
/// let input = b"data: 1\n\ndata: [DONE]\n\ndata: late\n\n";
/// let feed = framer
///     .feed(input, |ev| {
///         if ev.data == "[DONE]" { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
///     })
///     .unwrap();
/// assert_eq!(feed, Feed::Stopped { consumed: 23 });
/// assert_eq!(&input[23..], b"data: late\n\n");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feed {
    /// Every byte was consumed; incomplete lines and events are buffered until
    /// the next call.
    Consumed,
    /// The callback returned [`ControlFlow::Break`]. `consumed` bytes of the
    /// input were consumed: everything up to and including the line end of the
    /// blank line that dispatched the event (a CR line end whose LF may follow
    /// in the next read counts as consumed; that LF will be skipped). The
    /// framer is left in a consistent state: the rest of the input can be fed
    /// later, or inspected by the caller.
    Stopped {
        /// Number of bytes of the input consumed.
        consumed: usize,
    },
}

/// Where the framer is in the stream.
///
/// ```
/// use choicewise_sse::{Framer, Position};
/// use std::ops::ControlFlow;
///
/// let mut framer = Framer::new();
/// framer.feed(b"data: a\r\n\r\nda", |_| ControlFlow::Continue(())).unwrap();
/// assert_eq!(framer.position(), Position { line: 3, offset: 13 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    /// 1-based number of the line currently being read (every line end, CRLF
    /// counted once, increments it).
    pub line: u64,
    /// Total number of bytes consumed so far, a skipped BOM included.
    pub offset: u64,
}

/// What [`Framer::finish`] found at the end of the stream.
///
/// The WHATWG rules discard whatever was not dispatched by a blank line when
/// the stream ends; `Tail` tells the caller what was discarded, so it can
/// decide whether the stream ended cleanly. Three cases:
///
/// * **Clean end** ([`Tail::is_clean`]): no pending field line and no
///   partial line. Comment lines after the last event do not count. `line` and
///   `offset` are the final [`Position`].
/// * **Unterminated event** (`complete_lines == true`, `pending_bytes > 0`):
///   the pending event's field lines are all complete, but the blank line that
///   would have dispatched it never came. `pending_data` holds its data lines
///   joined with `'\n'` (`None` if it had no `data:` field), e.g. to accept a
///   trailing `data: [DONE]\n` without blank line.
/// * **Partial line** (`complete_lines == false`): the stream stopped in the
///   middle of a line; `partial_line` holds its raw bytes (not validated as
///   UTF-8). Any complete field lines of the same pending event before it are
///   in `pending_data` as above.
///
/// `line` and `offset` give where the discarded tail starts: the pending
/// event's first field line, or the partial line if no event was pending.
/// `pending_bytes` is the number of stream bytes from there to the end.
///
/// ```
/// use choicewise_sse::{Framer, Tail};
/// use std::ops::ControlFlow;
///
/// let mut framer = Framer::new();
/// framer.feed(b"data: 1\n\ndata: [DONE]\n", |_| ControlFlow::Continue(())).unwrap();
/// let tail = framer.finish();
/// assert!(tail.complete_lines && !tail.is_clean());
/// assert_eq!(tail.pending_data.as_deref(), Some("[DONE]"));
/// assert_eq!((tail.line, tail.offset, tail.pending_bytes), (3, 9, 13));
///
/// framer.feed(b"data: 1\n\ndata: [DO", |_| ControlFlow::Continue(())).unwrap();
/// let tail = framer.finish();
/// assert!(!tail.complete_lines);
/// assert_eq!(tail.partial_line, b"data: [DO");
/// assert_eq!(tail.pending_data, None);
///
/// framer.feed(b"data: 1\n\n: bye\n", |_| ControlFlow::Continue(())).unwrap();
/// assert!(framer.finish().is_clean());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Tail {
    /// Number of stream bytes discarded, from `offset` to the end of the
    /// stream; 0 for a clean end.
    pub pending_bytes: u64,
    /// The pending event's data lines joined with `'\n'`, if it had at least
    /// one complete `data:` line.
    pub pending_data: Option<String>,
    /// Raw bytes of the unterminated last line; empty if `complete_lines`.
    pub partial_line: Vec<u8>,
    /// 1-based line number where the discarded tail starts (the final line
    /// number for a clean end).
    pub line: u64,
    /// Byte offset where the discarded tail starts (the final offset for a
    /// clean end).
    pub offset: u64,
    /// `true` unless the stream ended in the middle of a line.
    pub complete_lines: bool,
}

impl Tail {
    /// `true` when nothing at all was pending: the stream ended right after a
    /// dispatched event, a blank line, or a comment line.
    ///
    /// ```
    /// use choicewise_sse::Framer;
    ///
    /// assert!(Framer::new().finish().is_clean());
    /// ```
    pub fn is_clean(&self) -> bool {
        self.pending_bytes == 0
    }
}
