//! The error type of the framer.

/// Why [`Framer::feed`](crate::Framer::feed) refused the stream.
///
/// Both kinds are fatal for the stream: after returning one, the framer is
/// *poisoned* and every later call to [`feed`](crate::Framer::feed) returns a
/// clone of the same error without looking at its input.
/// [`finish`](crate::Framer::finish) clears the poison (it resets the framer for
/// a new stream).
///
/// Positions are 1-based line numbers and 0-based byte offsets from the start
/// of the stream (a skipped byte-order mark counts: the first line of a stream
/// that starts with a BOM is at offset 3).
///
/// ```
/// use choicewise_sse::{Framer, SseError};
/// use std::ops::ControlFlow;
///
/// let mut framer = Framer::with_max_event_size(16);
/// let err = framer
///     .feed(b"data: a\n\ndata: this line is far too long\n", |_| ControlFlow::Continue(()))
///     .unwrap_err();
/// assert_eq!(err, SseError::EventTooLarge { limit: 16, line: 3, offset: 9 });
/// // Poisoned: the same error again.
/// assert_eq!(framer.feed(b"data: b\n\n", |_| ControlFlow::Continue(())), Err(err));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// The pending event grew beyond the framer's maximum event size.
    ///
    /// The size counted is the data already accumulated for the pending event
    /// plus the raw bytes of the line being read (field name included). It is
    /// checked as bytes arrive, so a runaway line without a line end fails as
    /// soon as it crosses the limit, before it is buffered whole.
    #[error(
        "SSE event starting at line {line} (byte {offset}) exceeds the maximum event size of {limit} bytes"
    )]
    EventTooLarge {
        /// The configured maximum event size, in bytes.
        limit: usize,
        /// Line number of the event's first field line (or, if the event had
        /// no field line yet, of the offending line).
        line: u64,
        /// Byte offset where that line starts.
        offset: u64,
    },
    /// The pending event has more field lines than the framer's maximum lines per event
    /// ([`Framer::max_lines`](crate::Framer::max_lines)); comment lines do not count.
    #[error(
        "SSE event starting at line {line} (byte {offset}) has more than {limit} lines (the maximum lines per event)"
    )]
    TooManyLines {
        /// The configured maximum number of field lines per event.
        limit: u32,
        /// Line number of the event's first field line.
        line: u64,
        /// Byte offset where that line starts.
        offset: u64,
    },
    /// A complete line is not valid UTF-8.
    #[error(
        "invalid UTF-8 in SSE line {line} (line starts at byte {offset}, first invalid byte at {byte_offset})"
    )]
    InvalidUtf8 {
        /// Line number of the offending line.
        line: u64,
        /// Byte offset where the offending line starts.
        offset: u64,
        /// Byte offset of the first byte that is not part of a valid UTF-8
        /// sequence.
        byte_offset: u64,
    },
}

impl SseError {
    /// The line where the stream went wrong (1-based).
    ///
    /// ```
    /// use choicewise_sse::SseError;
    /// let e = SseError::InvalidUtf8 { line: 4, offset: 30, byte_offset: 33 };
    /// assert_eq!(e.line(), 4);
    /// ```
    pub fn line(&self) -> u64 {
        match self {
            SseError::EventTooLarge { line, .. }
            | SseError::TooManyLines { line, .. }
            | SseError::InvalidUtf8 { line, .. } => *line,
        }
    }

    /// The byte offset where the stream went wrong: the start of the oversized event's line,
    /// or the first byte that is not valid UTF-8.
    ///
    /// ```
    /// use choicewise_sse::SseError;
    /// let e = SseError::InvalidUtf8 { line: 4, offset: 30, byte_offset: 33 };
    /// assert_eq!(e.offset(), 33);
    /// ```
    pub fn offset(&self) -> u64 {
        match self {
            SseError::EventTooLarge { offset, .. } | SseError::TooManyLines { offset, .. } => {
                *offset
            }
            SseError::InvalidUtf8 { byte_offset, .. } => *byte_offset,
        }
    }
}
